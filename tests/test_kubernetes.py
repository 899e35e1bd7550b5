"""Kubernetes without files to make: the key Job's script run for real, and the manifests' names,
RBAC, cluster-domain-free URLs and Host checks as the bridge itself evaluates them.

No Kubernetes API server can run on this machine (none is packaged for PyPI, npm or Debian, no
image can be pulled, and the Go module proxy is out of reach to build one), so
``examples/kubernetes/make_keys.py`` runs against ``FakeApiServer``, a **test double** named as
such: HTTPS with its own CA, service-account bearer tokens, and the subset of the core v1 Secrets
API the script uses (create, get), answering with the API server's own Status objects (201, 409
AlreadyExists, 403 Forbidden with RBAC's wording). It authorizes every request by evaluating the
**shipped** Role and RoleBinding from the kustomize output with RBAC's rules (a rule with
``resourceNames`` never admits a create), so the tests fail if the Role stops granting what the
script needs. The Secret the script sends is validated against the Kubernetes schema
(``kubernetes-validate --strict``). The script is the file the kustomization ships, run as a
child process with the interpreter and arguments the Job gives it, and (marked ``containers``) as the
Job's container from the project's image.

Two pods of the StatefulSet run for real (``test_two_pods_through_a_port_forward``): the bridge with
the environment the kubelet makes from the manifest, the `.svc` names of the pods in a private
/etc/hosts each, reached from "outside" through a TCP tunnel as ``kubectl port-forward`` gives it.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "examples" / "kubernetes"
SCRIPT = K8S / "make_keys.py"
BIN = Path(sys.executable).parent
NS = "gym-mcp-bridge"


# ------------------------------------------------------------------------ the manifests


def kubectl() -> str:
    found = shutil.which("kubectl")
    if not found:
        if os.environ.get("CI") == "true":  # this machine kind ships kubectl; a green CI must have run it
            pytest.fail("kubectl not installed under CI=true: the kustomize build was not checked")
        pytest.skip("kubectl not installed: no kustomize build")
    return found


def built() -> list[dict[str, Any]]:
    """`kubectl kustomize examples/kubernetes`, as shipped: nothing made beforehand."""
    proc = subprocess.run([kubectl(), "kustomize", str(K8S)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def job_secrets(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(Secret, key) pairs the key Job is told to make."""
    job = one(docs, "Job", "gym-mcp-bridge-keys")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    pairs = [arg.split("/", 1) for arg in container["args"]]
    return [(name, key) for name, key in pairs]


# ------------------------------------------------------------------ the API server double


def make_ca(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (the double's serving cert and the pod's ca.crt)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver (test double)")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "ca.crt", folder / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        **({"details": details} if details else {}),
        "code": code,
    }


class FakeApiServer:
    """Test double of kube-apiserver for core/v1 Secrets (create, get), with RBAC evaluated from
    Role/RoleBinding objects it is given (see the module docstring)."""

    def __init__(self, folder: Path, rbac: list[dict[str, Any]]) -> None:
        self.cert, key = make_ca(folder)
        self.tokens: dict[str, str] = {}  # bearer token -> service-account user name
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.received: list[dict[str, Any]] = []  # bodies of the creates, as sent
        self.requests: list[tuple[str, str, int]] = []
        self.rbac = rbac
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                double.serve(self, "GET")

            def do_POST(self) -> None:
                double.serve(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def service_account(self, folder: Path, namespace: str, name: str) -> Path:
        """A pod's /var/run/secrets/kubernetes.io/serviceaccount for ``namespace/name``."""
        token = base64.urlsafe_b64encode(os.urandom(24)).decode()
        self.tokens[token] = f"system:serviceaccount:{namespace}:{name}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "token").write_text(token)
        (folder / "namespace").write_text(namespace)
        shutil.copy(self.cert, folder / "ca.crt")
        return folder

    def allowed(self, user: str, namespace: str, verb: str, name: str | None) -> bool:
        """RBAC: some RoleBinding in ``namespace`` binds ``user`` to a Role with a matching rule."""
        roles = {
            d["metadata"]["name"]: d
            for d in self.rbac
            if d["kind"] == "Role" and d["metadata"].get("namespace") == namespace
        }
        for binding in self.rbac:
            if binding["kind"] != "RoleBinding" or binding["metadata"].get("namespace") != namespace:
                continue
            subjects = [
                f"system:serviceaccount:{s.get('namespace', namespace)}:{s['name']}"
                for s in binding.get("subjects", [])
                if s["kind"] == "ServiceAccount"
            ]
            role = roles.get(binding["roleRef"]["name"])
            if user not in subjects or role is None or binding["roleRef"]["kind"] != "Role":
                continue
            for rule in role.get("rules", []):
                names = rule.get("resourceNames") or []
                if (
                    "" in rule.get("apiGroups", [])
                    and {"secrets", "*"} & set(rule.get("resources", []))
                    and {verb, "*"} & set(rule.get("verbs", []))
                    and (not names or (verb != "create" and name in names))
                ):
                    return True
        return False

    def serve(self, request: BaseHTTPRequestHandler, method: str) -> None:
        code, body = self.answer(request, method)
        self.requests.append((method, request.path, code))
        data = json.dumps(body).encode()
        request.send_response(code)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def answer(self, request: BaseHTTPRequestHandler, method: str) -> tuple[int, dict[str, Any]]:
        auth = request.headers.get("Authorization", "")
        user = self.tokens.get(auth.removeprefix("Bearer ")) if auth.startswith("Bearer ") else None
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length) if length else b""
        if user is None:
            return 401, status(401, "Unauthorized", "Unauthorized")
        found = re.fullmatch(r"/api/v1/namespaces/([a-z0-9-]+)/secrets(?:/([a-z0-9.-]+))?", request.path)
        if not found:
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        namespace, name = found.group(1), found.group(2)
        verb = "create" if method == "POST" and name is None else "get" if method == "GET" and name else None
        if verb is None:
            return 405, status(405, "MethodNotAllowed", f"{method} is not supported here")
        if not self.allowed(user, namespace, verb, name):
            what = f'secrets "{name}"' if name else "secrets"
            return 403, status(
                403,
                "Forbidden",
                f'{what} is forbidden: User "{user}" cannot {verb} resource "secrets" in API group "" '
                f'in the namespace "{namespace}"',
                **({"name": name} if name else {}),
                kind="secrets",
            )
        if verb == "get":
            assert name is not None
            secret = self.secrets.get((namespace, name))
            if secret is None:
                return 404, status(404, "NotFound", f'secrets "{name}" not found', name=name, kind="secrets")
            return 200, secret
        body = json.loads(raw)
        self.received.append(body)
        meta = body.get("metadata", {})
        if body.get("apiVersion") != "v1" or body.get("kind") != "Secret" or not meta.get("name"):
            return 400, status(400, "BadRequest", "not a v1 Secret with a name")
        if meta.get("namespace", namespace) != namespace:
            return 400, status(400, "BadRequest", "the namespace of the object does not match the request")
        for value in (body.get("data") or {}).values():
            base64.b64decode(value, validate=True)
        key = (namespace, meta["name"])
        if key in self.secrets:
            return 409, status(
                409,
                "AlreadyExists",
                f'secrets "{meta["name"]}" already exists',
                name=meta["name"],
                kind="secrets",
            )
        stored = {**body, "metadata": {**meta, "namespace": namespace, "uid": os.urandom(8).hex()}}
        self.secrets[key] = stored
        return 201, stored

    def put(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """A Secret made some other way (an operator's own, or an earlier install's)."""
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        self.secrets[(namespace, name)] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "data": encoded,
        }

    def value(self, namespace: str, name: str, key: str) -> str:
        return base64.b64decode(self.secrets[(namespace, name)]["data"][key]).decode()


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return built()


@pytest.fixture
def apiserver(tmp_path: Path, docs: list[dict[str, Any]]) -> Iterator[FakeApiServer]:
    rbac = [d for d in docs if d["kind"] in ("Role", "RoleBinding")]
    server = FakeApiServer(tmp_path, rbac)
    try:
        yield server
    finally:
        server.close()


def run_job(
    api: FakeApiServer, docs: list[dict[str, Any]], sa: Path, port: int | None = None
) -> subprocess.CompletedProcess[str]:
    """The Job's container as the kustomize output gives it: its command's script (the shipped file)
    with its arguments, in a pod whose service account is ``sa``."""
    job = one(docs, "Job", "gym-mcp-bridge-keys")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"][0] == "python3"
    mounted = container["command"][1]
    (mount,) = [m for m in container["volumeMounts"] if mounted.startswith(m["mountPath"] + "/")]
    volume = next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    config = one(docs, "ConfigMap", volume["configMap"]["name"])
    script_name = mounted.removeprefix(mount["mountPath"] + "/")
    script = sa.parent / script_name
    script.write_text(config["data"][script_name])  # what the pod sees in its ConfigMap volume
    env = {
        "PATH": os.environ.get("PATH", ""),
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(port or api.port),
    }
    return subprocess.run(
        [sys.executable, str(script), *container["args"], "--service-account", str(sa)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def job_account(api: FakeApiServer, docs: list[dict[str, Any]], tmp_path: Path) -> Path:
    job = one(docs, "Job", "gym-mcp-bridge-keys")
    return api.service_account(
        tmp_path / "pod" / "serviceaccount",
        job["metadata"]["namespace"],
        job["spec"]["template"]["spec"]["serviceAccountName"],
    )


# -------------------------------------------------------------------- the key Job, run


def test_the_job_creates_both_secrets_when_absent(
    apiserver: FakeApiServer, docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    proc = run_job(apiserver, docs, job_account(apiserver, docs, tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    wanted = job_secrets(docs)
    assert wanted == [("gym-mcp-bridge-signing-key", "secret"), ("gym-mcp-bridge-api-key", "api-key")]
    values = []
    for name, key in wanted:
        secret = apiserver.secrets[(NS, name)]
        assert set(secret["data"]) == {key}, "one key per Secret: the API key and the signing key apart"
        value = apiserver.value(NS, name, key)
        assert re.fullmatch(r"[0-9a-f]{64}\n", value), "32 random bytes as hex, as `openssl rand -hex 32`"
        values.append(value)
        assert f"created Secret {name} in namespace {NS}" in proc.stdout
    assert values[0] != values[1]
    # the bridge accepts the signing key as its secret_file (32 bytes or more, not a placeholder)
    from bridge.settings import Settings

    key_file = tmp_path / "secret"
    key_file.write_text(values[0])
    keys, generated = Settings(secret_file=key_file).signing_keys()
    assert keys == [values[0].strip()] and not generated
    # what the script sent is a valid v1 Secret
    validate = subprocess.run(
        [str(BIN / "kubernetes-validate"), "--strict", "--quiet", "-"],
        input=yaml.safe_dump_all(apiserver.received),
        capture_output=True,
        text=True,
    )
    assert validate.returncode == 0, validate.stdout + validate.stderr


def test_a_reapply_never_rotates_a_key(
    apiserver: FakeApiServer, docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    sa = job_account(apiserver, docs, tmp_path)
    assert run_job(apiserver, docs, sa).returncode == 0
    before = {name: apiserver.value(NS, name, key) for name, key in job_secrets(docs)}
    again = run_job(apiserver, docs, sa)  # the Job of the next `kubectl apply -k`
    assert again.returncode == 0, again.stderr
    assert {name: apiserver.value(NS, name, key) for name, key in job_secrets(docs)} == before
    for name in before:
        assert f"kept Secret {name} in namespace {NS}: it exists" in again.stdout
    # the second run asked to create (409) and read the existing one; it changed nothing
    assert [(m, c) for m, _, c in apiserver.requests[2:]] == [("POST", 409), ("GET", 200)] * 2


def test_an_operators_own_key_is_kept_and_the_missing_one_made(
    apiserver: FakeApiServer, docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    own = os.urandom(32).hex() + "\n"
    apiserver.put(NS, "gym-mcp-bridge-api-key", {"api-key": own})
    proc = run_job(apiserver, docs, job_account(apiserver, docs, tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert apiserver.value(NS, "gym-mcp-bridge-api-key", "api-key") == own
    assert "created Secret gym-mcp-bridge-signing-key" in proc.stdout
    assert "kept Secret gym-mcp-bridge-api-key" in proc.stdout


def test_forbidden_is_one_clear_line(
    apiserver: FakeApiServer, docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    # a service account the shipped RoleBinding does not name (e.g. the Job's pod under another one)
    sa = apiserver.service_account(tmp_path / "other" / "serviceaccount", NS, "default")
    proc = run_job(apiserver, docs, sa)
    assert proc.returncode == 1
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line == (
        f"gym-mcp-bridge-keys: forbidden to create Secret gym-mcp-bridge-signing-key in namespace {NS}: "
        f'secrets is forbidden: User "system:serviceaccount:{NS}:default" cannot create resource "secrets" '
        f'in API group "" in the namespace "{NS}"'
    )
    assert not apiserver.secrets, "nothing was created"


def test_the_role_reads_only_the_two_secrets(
    apiserver: FakeApiServer, docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    """A Secret of another name that exists: the script may not read it (403, one line)."""
    apiserver.put(NS, "someone-else", {"token": "x"})
    sa = job_account(apiserver, docs, tmp_path)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "someone-else/token", "--service-account", str(sa)],
        capture_output=True,
        text=True,
        env={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(apiserver.port)},
        timeout=60,
    )
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"gym-mcp-bridge-keys: forbidden to read Secret someone-else in namespace {NS}: ")
    assert 'cannot get resource "secrets"' in line


def test_an_existing_secret_without_the_key_is_one_clear_line(
    apiserver: FakeApiServer, docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    apiserver.put(NS, "gym-mcp-bridge-signing-key", {"key": os.urandom(32).hex()})
    proc = run_job(apiserver, docs, job_account(apiserver, docs, tmp_path))
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line == (
        f"gym-mcp-bridge-keys: Secret gym-mcp-bridge-signing-key in namespace {NS} exists but has no key "
        "'secret' (keys: key): the bridge mounts 'secret'; fix the Secret or delete it and run this Job again"
    )


def test_an_unreachable_api_is_one_clear_line(
    apiserver: FakeApiServer, docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    from benchmarks.procs import free_port

    port = free_port()
    proc = run_job(apiserver, docs, job_account(apiserver, docs, tmp_path), port=port)
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith(
        f"gym-mcp-bridge-keys: cannot reach the Kubernetes API at https://127.0.0.1:{port}: "
    )


def test_no_service_account_token_is_one_clear_line(docs: list[dict[str, Any]], tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "a/b", "--service-account", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        env={"KUBERNETES_SERVICE_HOST": "127.0.0.1"},
        timeout=60,
    )
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert "needs automountServiceAccountToken: true" in line


# -------------------------------------------------- the manifests the Job and the pods agree on


def test_the_job_the_role_and_the_pods_name_the_same_secrets(docs: list[dict[str, Any]]) -> None:
    wanted = dict(job_secrets(docs))
    role = one(docs, "Role", "gym-mcp-bridge-keys")
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert verbs == {"create", "get"}, "no list, watch, update, patch or delete"
    (get,) = [r for r in role["rules"] if "get" in r["verbs"]]
    assert sorted(get["resourceNames"]) == sorted(wanted), "get only the two Secrets, by name"
    for rule in role["rules"]:
        assert rule["resources"] == ["secrets"] and rule["apiGroups"] == [""]
    binding = one(docs, "RoleBinding", "gym-mcp-bridge-keys")
    job = one(docs, "Job", "gym-mcp-bridge-keys")
    pod = job["spec"]["template"]["spec"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": pod["serviceAccountName"],
            "namespace": job["metadata"]["namespace"],
        }
    ]
    # the bridge's pods mount exactly those keys, and wait for them (no optional source)
    sts = one(docs, "StatefulSet", "gym-mcp-bridge")
    spec = sts["spec"]["template"]["spec"]
    bridge = next(c for c in spec["containers"] if c["name"] == "bridge")
    env = {e["name"]: e.get("value") for e in bridge["env"]}
    files = {}
    for volume in spec["volumes"]:
        for source in volume.get("projected", {}).get("sources", []):
            secret = source["secret"]
            assert not secret.get("optional"), "the pod waits for the Secret"
            (item,) = secret["items"]
            assert item["key"] == wanted[secret["name"]]
            mount = next(m for m in bridge["volumeMounts"] if m["name"] == volume["name"])
            files[f"{mount['mountPath']}/{item['path']}"] = secret["name"]
    assert files == {
        env["GYM_MCP_BRIDGE_SECRET_FILE"]: "gym-mcp-bridge-signing-key",
        env["GYM_MCP_BRIDGE_API_KEY_FILE"]: "gym-mcp-bridge-api-key",
    }
    assert not any(d["kind"] == "Secret" for d in docs), "no key in the manifests"
    # the shipped script is the one in the ConfigMap
    config = one(docs, "ConfigMap", pod["volumes"][0]["configMap"]["name"])
    assert config["data"]["make_keys.py"] == SCRIPT.read_text()


def test_the_job_runs_under_the_restricted_profile_and_cleans_up(docs: list[dict[str, Any]]) -> None:
    job = one(docs, "Job", "gym-mcp-bridge-keys")
    spec = job["spec"]
    assert 0 < spec["ttlSecondsAfterFinished"] <= 3600, "gone soon after: the next apply can create it again"
    assert spec["activeDeadlineSeconds"] > 0, "a Job that cannot run (image pull) fails and goes"
    pod = spec["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True, "the script authenticates with the pod's token"
    account = one(docs, "ServiceAccount", pod["serviceAccountName"])
    assert account["automountServiceAccountToken"] is False, "no other pod gets this account's token"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert sc["readOnlyRootFilesystem"] is True
    sts = one(docs, "StatefulSet", "gym-mcp-bridge")
    assert container["image"] == sts["spec"]["template"]["spec"]["containers"][0]["image"], "the bridge image"
    # its pod is not one of the bridge's: no Service, PDB or NetworkPolicy selects it
    labels = spec["template"]["metadata"]["labels"]
    for d in docs:
        selector = (d["spec"].get("selector") or d["spec"].get("podSelector") or {}) if "spec" in d else {}
        if d["kind"] in ("Service", "PodDisruptionBudget", "NetworkPolicy"):
            wanted = selector.get("matchLabels", selector)
            assert not wanted.items() <= labels.items(), d["metadata"]["name"]


# ------------------------------------------- any cluster domain; the Host checks, as the bridge runs them


def expand(env: list[dict[str, Any]], values: dict[str, str]) -> dict[str, str]:
    """A container's env as the kubelet makes it: fieldRefs from ``values``, $(VAR) of earlier ones."""
    out: dict[str, str] = {}
    for item in env:
        if "value" in item:
            out[item["name"]] = re.sub(
                r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: out.get(m[1], m[0]), item["value"]
            )
        else:
            out[item["name"]] = values[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return out


def pod_env(docs: list[dict[str, Any]], pod: str, namespace: str) -> dict[str, str]:
    sts = one(docs, "StatefulSet", "gym-mcp-bridge")
    bridge = next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "bridge")
    return expand(bridge["env"], {"metadata.name": pod, "metadata.namespace": namespace})


def test_no_cluster_domain_anywhere(docs: list[dict[str, Any]]) -> None:
    text = "\n".join(p.read_text() for p in K8S.glob("*.yaml"))
    assert "cluster.local" not in re.sub(r"#.*", "", text), "works on any cluster domain"
    env = pod_env(docs, "gym-mcp-bridge-1", "rl")
    assert (
        env["GYM_MCP_BRIDGE_ADVERTISE_URL"] == "http://gym-mcp-bridge-1.gym-mcp-bridge-headless.rl.svc:8000"
    )


@pytest.mark.parametrize("namespace", ["gym-mcp-bridge", "rl-envs"])
def test_hosts_and_peers_as_the_bridge_checks_them(
    docs: list[dict[str, Any]], namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bridge's own Settings, default peers and DNS-rebinding allow-list, from pod 0's env."""
    from bridge.http.guard import host_allowed, rebinding_protection
    from bridge.peers import Peers, default_peers
    from bridge.settings import Settings

    env = pod_env(docs, "gym-mcp-bridge-0", namespace)
    for name in ("GYM_MCP_BRIDGE_SECRET_FILE", "GYM_MCP_BRIDGE_API_KEY_FILE"):
        path = tmp_path / name
        path.write_text(os.urandom(32).hex() + "\n")
        env[name] = str(path)
    for name, value in env.items():
        if name.startswith("GYM_MCP_BRIDGE_"):
            monkeypatch.setenv(name, value)
    settings = Settings()
    advertise = settings.advertise_url
    assert advertise == f"http://gym-mcp-bridge-0.gym-mcp-bridge-headless.{namespace}.svc:8000"
    assert settings.peers is None, "the default peers, from the advertise URL"
    peers = Peers(default_peers(advertise))
    assert str(peers) == f"http://*.gym-mcp-bridge-headless.{namespace}.svc:8000"
    assert peers.allows(f"http://gym-mcp-bridge-7.gym-mcp-bridge-headless.{namespace}.svc:8000")
    assert not peers.allows("http://gym-mcp-bridge-7.gym-mcp-bridge-headless.other.svc:8000")
    assert not peers.allows("http://evil.example:8000")

    allowed = rebinding_protection(settings, settings.host, advertise).allowed_hosts or []
    for host in (
        "localhost:8000",  # kubectl port-forward svc/gym-mcp-bridge 8000:8000
        "127.0.0.1:8000",
        "gym-mcp-bridge:8000",  # the seed Service, from the same namespace
        f"gym-mcp-bridge.{namespace}:8000",
        f"gym-mcp-bridge.{namespace}.svc:8000",  # from any namespace, any cluster domain
        f"gym-mcp-bridge-0.gym-mcp-bridge-headless.{namespace}.svc:8000",  # mcp.url, and forwarded requests
    ):
        assert host_allowed(host, allowed), host
    for host in ("evil.example:8000", f"gym-mcp-bridge-1.gym-mcp-bridge-headless.{namespace}.svc:8000"):
        assert not host_allowed(host, allowed), host


def test_the_docs_name_the_service_as_the_manifests_accept_it(docs: list[dict[str, Any]]) -> None:
    """The Kubernetes instance block of docs/clients.md reaches the seed Service by a name its
    allow-list accepts, on any cluster domain."""
    from bridge.http.guard import host_allowed, rebinding_protection
    from bridge.settings import Settings

    text = (ROOT / "docs" / "clients.md").read_text()
    urls = re.findall(r"bridge_url: (http://gym-mcp-bridge\.[^\s]+)", text)
    assert urls, "the Kubernetes block of docs/clients.md"
    env = pod_env(docs, "gym-mcp-bridge-0", NS)
    settings = Settings(
        advertise_url=env["GYM_MCP_BRIDGE_ADVERTISE_URL"],
        allowed_hosts=env["GYM_MCP_BRIDGE_ALLOWED_HOSTS"],
        host=env["GYM_MCP_BRIDGE_HOST"],
    )
    allowed = rebinding_protection(settings, settings.host, env["GYM_MCP_BRIDGE_ADVERTISE_URL"]).allowed_hosts
    for url in urls:
        host = url.removeprefix("http://").split("/")[0]
        assert "cluster.local" not in host
        assert host_allowed(host, allowed or []), host


FAKE_KUBECTL = r'''
"""kubectl for the rotation snippets of docs/deployment.md (a test double around the real one):
`patch` is the real `kubectl patch --local` on the stored Secret, then stringData folded into data
as the API server does; `get ... -o jsonpath={.data.KEY}` prints it; `rollout` is logged."""
import base64, json, pathlib, subprocess, sys

state = pathlib.Path(sys.argv[1])
args = sys.argv[2:]
log = state / "log"
if "-n" in args:
    i = args.index("-n")
    del args[i : i + 2]
if args[0] == "rollout":
    with log.open("a") as f:
        f.write(" ".join(args) + "\n")
elif args[0] == "get":
    name, path = args[2], args[args.index("-o") + 1]
    key = path.removeprefix("jsonpath={.data.").removesuffix("}")
    print(json.loads((state / name).read_text())["data"][key], end="")
elif args[0] == "patch":
    name, patch = args[2], args[args.index("-p") + 1]
    out = subprocess.run(
        ["kubectl", "patch", "--local", "-f", str(state / name), "--type", "merge",
         "-p", patch, "-o", "json"],
        capture_output=True, text=True, check=True,
    ).stdout
    secret = json.loads(out)
    for k, v in secret.pop("stringData", {}).items():
        secret["data"][k] = base64.b64encode(v.encode()).decode()
    (state / name).write_text(json.dumps(secret))
    with log.open("a") as f:
        f.write(f"patch {name}\n")
else:
    sys.exit(f"fake kubectl: {args}")
'''


def rotation_snippets() -> list[str]:
    text = (ROOT / "docs" / "deployment.md").read_text()
    section = text[text.index("### Rotating a key") :]
    section = section[: section.index("\n### ")]
    return [re.sub(r"(?m)^  ", "", block) for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_the_documented_rotations_write_what_the_bridge_reads(tmp_path: Path) -> None:
    """The shell of docs/deployment.md's "Rotating a key", run by bash with kubectl's real local patch:
    each step leaves the key file the bridge reads with the keys in the documented order, and
    restarts the pods after each change; the other Secret is never touched."""
    kubectl()
    from bridge.settings import Settings

    state = tmp_path / "state"
    state.mkdir()
    old = {
        "gym-mcp-bridge-signing-key": ("secret", os.urandom(32).hex()),
        "gym-mcp-bridge-api-key": ("api-key", "k" * 64),
    }
    for name, (key, value) in old.items():
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name},
            "type": "Opaque",
            "data": {key: base64.b64encode((value + "\n").encode()).decode()},
        }
        (state / name).write_text(json.dumps(secret))
    helper = tmp_path / "fake_kubectl.py"
    helper.write_text(FAKE_KUBECTL)

    def data(name: str) -> str:
        key = old[name][0]
        return base64.b64decode(json.loads((state / name).read_text())["data"][key]).decode()

    api_block, signing_block = rotation_snippets()
    prelude = f'kubectl() {{ "{sys.executable}" "{helper}" "{state}" "$@"; }}\nset -e\n'

    run = subprocess.run(["bash", "-c", prelude + api_block], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert re.fullmatch(r"[0-9a-f]{64}", data("gym-mcp-bridge-api-key"))
    assert data("gym-mcp-bridge-api-key") != old["gym-mcp-bridge-api-key"][1]
    assert data("gym-mcp-bridge-signing-key") == old["gym-mcp-bridge-signing-key"][1] + "\n", "not touched"
    assert (state / "log").read_text().splitlines()[-2:] == [
        "rollout restart statefulset/gym-mcp-bridge",
        "rollout status statefulset/gym-mcp-bridge",
    ]
    api_key = data("gym-mcp-bridge-api-key")

    # the signing-key block, step by step: the key file after each patch, as the bridge reads it
    seen: list[list[str]] = []
    probe = tmp_path / "keys"
    stepped = signing_block.replace(
        'kubectl -n "$ns" rollout restart',
        f"\"{sys.executable}\" -c \"import base64, json, sys; print(json.loads(open(sys.argv[1]).read())['data']['secret'])\" "
        f'"{state}/gym-mcp-bridge-signing-key" >> "{probe}"\n    kubectl -n "$ns" rollout restart',
    )
    run = subprocess.run(["bash", "-c", prelude + stepped], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    for line in probe.read_text().splitlines():
        path = tmp_path / "secret_file"
        path.write_bytes(base64.b64decode(line))
        seen.append(Settings(secret_file=path).signing_keys()[0])
    first = old["gym-mcp-bridge-signing-key"][1]
    assert len(seen) == 3
    new = seen[2][0]
    assert seen == [[first, new], [new, first], [new]]
    assert new != first and re.fullmatch(r"[0-9a-f]{64}", new)
    assert data("gym-mcp-bridge-api-key") == api_key, "the API key's Secret is not touched"
    assert (state / "log").read_text().count("rollout restart") == 1 + 3


# ------------------------------------- two pods as the StatefulSet runs them, reached through a tunnel


class Tunnel:
    """What `kubectl port-forward svc/gym-mcp-bridge L:8000` gives a workstation: a local port whose
    connections end up at one pod's port, bytes passed as they are (the Host header too)."""

    def __init__(self, target: tuple[str, int]) -> None:
        import socket

        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def pipe(src: Any, dst: Any) -> None:
        import socket

        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def can_unshare() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    return probe.returncode == 0


def test_two_pods_through_a_port_forward(
    apiserver: FakeApiServer, docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The StatefulSet's bridge container, twice (pods 0 and 1), with the env the kubelet makes from
    the manifest and the keys the Job made (through the API double), each in its own mount namespace
    whose /etc/hosts gives the pods' names (`<pod>.gym-mcp-bridge-headless.<ns>.svc`, no cluster
    domain) their own loopback addresses, each over its own Gym server. A workstation reaches pod 0
    through a tunnel, as `kubectl port-forward` gives it (Host: localhost:L, no allowed_hosts
    change): it seeds and plays a whole MCP rollout at the tunnel's URL + `mcp.url_path`, and plays a
    session the trainer seeded on pod 1 (through the Service's name), which pod 0 forwards to its
    owner by the owner's advertise URL. Rewards come from the Gym servers' own /verify."""
    import asyncio

    import httpx
    from conftest import GYM_PYTHON, boot_upstream, wait_for_upstream
    from container_helpers import SEED_ROW, TOKEN_HEADER, mcp_call, responses_object, result_json

    from benchmarks.procs import free_port

    if not can_unshare():
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root with unshare: the pods were not run")
        pytest.skip("needs root and unshare --mount (a private /etc/hosts per pod)")
    if not GYM_PYTHON.exists():
        pytest.fail("the Gym environment is missing: run 'make setup'")

    # the keys, as the Job makes them in the cluster
    made = run_job(apiserver, docs, job_account(apiserver, docs, tmp_path))
    assert made.returncode == 0, made.stderr
    api_key = apiserver.value(NS, "gym-mcp-bridge-api-key", "api-key").strip()

    port = free_port()  # the pods' port (8000 in the manifest; this machine may already use 8000)
    pods = [f"gym-mcp-bridge-{i}" for i in range(2)]
    ips = ["127.0.0.2", "127.0.0.3"]
    names = [f"{pod}.gym-mcp-bridge-headless.{NS}.svc" for pod in pods]
    hosts = tmp_path / "hosts"
    hosts.write_text(
        "127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for ip, name in zip(ips, names, strict=True))
    )
    keys = tmp_path / "keys"
    keys.mkdir()
    for name, key in job_secrets(docs):
        (keys / key).write_text(apiserver.value(NS, name, key))

    started: list[subprocess.Popen[bytes]] = []
    tunnel = None
    try:
        upstreams = []
        for i in range(2):
            log = tmp_path / f"upstream-{i}.log"
            proc = boot_upstream(
                GYM_PYTHON, "example_session_state_mgmt", tmp_path / f"upstream-{i}.json", log
            )
            started.append(proc)
            upstreams.append(wait_for_upstream(proc, tmp_path / f"upstream-{i}.json", log, time_left(240)))
        logs = []
        for i, pod in enumerate(pods):
            env = pod_env(docs, pod, NS)
            assert env["GYM_MCP_BRIDGE_ADVERTISE_URL"] == f"http://{names[i]}:8000"
            mounted = {
                env["GYM_MCP_BRIDGE_SECRET_FILE"]: keys / "secret",
                env["GYM_MCP_BRIDGE_API_KEY_FILE"]: keys / "api-key",
            }
            env.update(
                GYM_MCP_BRIDGE_ADVERTISE_URL=f"http://{names[i]}:{port}",
                GYM_MCP_BRIDGE_HOST=ips[i],  # the pod's own address; 0.0.0.0 in its own network namespace
                GYM_MCP_BRIDGE_PORT=str(port),
                GYM_MCP_BRIDGE_UPSTREAM_URL=upstreams[i],
                GYM_MCP_BRIDGE_SECRET_FILE=str(mounted[env["GYM_MCP_BRIDGE_SECRET_FILE"]]),
                GYM_MCP_BRIDGE_API_KEY_FILE=str(mounted[env["GYM_MCP_BRIDGE_API_KEY_FILE"]]),
                GYM_MCP_BRIDGE_SHUTDOWN_GRACE_S="5",
                HOME=str(tmp_path),
            )
            base = {k: v for k, v in os.environ.items() if not k.startswith("GYM_MCP_BRIDGE_")}
            log_path = tmp_path / f"{pod}.log"
            logs.append(log_path)
            started.append(
                subprocess.Popen(
                    [
                        "unshare",
                        "--mount",
                        "sh",
                        "-c",
                        'mount --bind "$0" /etc/hosts && exec "$@"',
                        str(hosts),
                        sys.executable,
                        "-m",
                        "bridge",
                        "serve",
                    ],
                    cwd=ROOT,
                    env={**base, **env},
                    stdout=log_path.open("wb"),
                    stderr=subprocess.STDOUT,
                )
            )
        for i, log_path in enumerate(logs):  # ready: the upstream answers and the advertise URL reaches it
            deadline = time_left(120)
            while True:
                assert started[2 + i].poll() is None, log_path.read_text()
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://{ips[i]}:{port}/readyz", timeout=2).status_code == 200:
                        break
                assert time_left(0) < deadline, log_path.read_text()
                time.sleep(0.2)

        tunnel = Tunnel((ips[0], port))
        outside = f"http://localhost:{tunnel.port}"
        auth = {"Authorization": f"Bearer {api_key}"}
        calls = [
            ("increment_counter", {"count": 1}),
            ("increment_counter", {"count": 2}),
            ("get_counter_value", {}),
        ]

        def play(seeded: dict[str, Any], owner: int) -> float:
            meta = seeded["mcp"]
            assert meta["url"] == f"http://{names[owner]}:{port}/mcp", "the owner's in-cluster URL"
            headers = {TOKEN_HEADER: meta["headers"][TOKEN_HEADER]}
            results = asyncio.run(mcp_call(f"{outside}{meta['url_path']}", headers, calls))
            assert result_json(results[-1]) == {"count": 6}
            body = {**SEED_ROW, "response": responses_object(calls, "6"), "expected_count": 6}
            verified = httpx.post(f"{outside}/verify", json=body, headers={**auth, **headers}, timeout=60)
            assert verified.status_code == 200, verified.text
            return float(verified.json()["reward"])

        # the workstation seeds through the tunnel: pod 0 owns the session
        seeded = httpx.post(f"{outside}/seed_session", json=SEED_ROW, headers=auth, timeout=30)
        assert seeded.status_code == 200, seeded.text
        assert play(seeded.json(), owner=0) == 1.0
        # the trainer seeds inside the cluster, through the Service's name; the pod behind it was pod 1
        seeded = httpx.post(
            f"http://{ips[1]}:{port}/seed_session",
            json=SEED_ROW,
            headers={**auth, "Host": f"gym-mcp-bridge.{NS}.svc:{port}"},
            timeout=30,
        )
        assert seeded.status_code == 200, seeded.text
        assert play(seeded.json(), owner=1) == 1.0
        metrics = httpx.get(f"http://{ips[0]}:{port}/metrics", timeout=5).text
        relayed = re.search(r'gym_mcp_bridge_forwarded_total\{outcome="relayed"\} (\S+)', metrics)
        assert relayed and float(relayed[1]) >= 4, "pod 0 forwarded pod 1's calls and /verify to pod 1"
        # without the API key the tunnel seeds nothing
        assert httpx.post(f"{outside}/seed_session", json=SEED_ROW, timeout=30).status_code == 401
    finally:
        if tunnel is not None:
            tunnel.close()
        for proc in reversed(started):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    if proc in started[:2]:
                        os.killpg(proc.pid, 9)
                    else:
                        proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(30)
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def time_left(seconds: float) -> float:
    return time.monotonic() + seconds


@pytest.mark.containers
@pytest.mark.timeout(1200)
def test_the_job_container_in_the_bridge_image(
    apiserver: FakeApiServer,
    docs: list[dict[str, Any]],
    tmp_path: Path,
    docker_engine: Any,
    docker_image: str,
) -> None:
    """The Job's container as keys-job.yaml writes it, run from the project's image (its python3, its
    user, read-only root, no capabilities), the ConfigMap's script and the service account mounted
    where the kubelet mounts them, against the API double: both Secrets made, then kept."""
    job = one(docs, "Job", "gym-mcp-bridge-keys")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = container["volumeMounts"]
    config = one(docs, "ConfigMap", pod["volumes"][0]["configMap"]["name"])
    script_dir = tmp_path / "configmap"
    script_dir.mkdir()
    for name, text in config["data"].items():
        (script_dir / name).write_text(text)
    sa = job_account(apiserver, docs, tmp_path)
    for folder in (script_dir, sa):
        folder.chmod(0o755)
        for f in folder.iterdir():
            f.chmod(0o644)

    def run() -> tuple[int, str]:
        box = docker_engine.client.containers.run(
            docker_image,
            entrypoint=container["command"],
            command=container["args"],
            user=f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}",
            environment={
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(apiserver.port),
            },
            volumes={
                str(script_dir): {"bind": mount["mountPath"], "mode": "ro"},
                str(sa): {"bind": "/var/run/secrets/kubernetes.io/serviceaccount", "mode": "ro"},
            },
            network_mode="host",  # the API double listens on the host's loopback
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            labels={"gym-mcp-bridge.test": "1"},
            detach=True,
        )
        try:
            code = box.wait(timeout=120)["StatusCode"]
            return code, box.logs().decode(errors="replace")
        finally:
            box.remove(force=True)

    code, out = run()
    assert code == 0, out
    made = {name: apiserver.value(NS, name, key) for name, key in job_secrets(docs)}
    assert all(re.fullmatch(r"[0-9a-f]{64}\n", v) for v in made.values()), made.keys()
    assert out.count("gym-mcp-bridge-keys: created Secret") == 2, out
    code, out = run()
    assert code == 0, out
    assert {name: apiserver.value(NS, name, key) for name, key in job_secrets(docs)} == made
    assert out.count("gym-mcp-bridge-keys: kept Secret") == 2, out
