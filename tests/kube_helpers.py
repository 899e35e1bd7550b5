"""Shared code for the Kubernetes tests (tests/test_kubernetes.py, tests/test_kubernetes_keys.py):
the kustomize output as shipped, and ``FakeApiServer``, the **test double** of the Kubernetes API
server the key Job's script runs against (why a double: tests/test_kubernetes_keys.py).
"""

from __future__ import annotations

import base64
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


def time_left(seconds: float) -> float:
    """A deadline ``seconds`` from now (time.monotonic)."""
    return time.monotonic() + seconds
