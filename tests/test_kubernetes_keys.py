"""Kubernetes keys made in the cluster: the key Job's script (``examples/kubernetes/make_keys.py``) run
for real, and the names, RBAC and security profile the Job, the Role and the pods agree on.

No Kubernetes API server can run on this machine (none is packaged for PyPI, npm or Debian, no
image can be pulled, and the Go module proxy is out of reach to build one), so
``examples/kubernetes/make_keys.py`` runs against ``FakeApiServer`` (tests/fixtures/kube.py), a
**test double** named as such: HTTPS with its own CA, service-account bearer tokens, and the subset
of the core v1 Secrets API the script uses (create, get), answering with the API server's own Status
objects (201, 409 AlreadyExists, 403 Forbidden with RBAC's wording). It authorizes every request by
evaluating the **shipped** Role and RoleBinding from the kustomize output with RBAC's rules (a rule
with ``resourceNames`` never admits a create), so the tests fail if the Role stops granting what the
script needs. The Secret the script sends is validated against the Kubernetes schema
(``kubernetes-validate --strict``). The script is the file the kustomization ships, run as a child
process with the interpreter and arguments the Job gives it, and (marked ``containers``) as the
Job's container from the project's image.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.kube import BIN, NS, SCRIPT, FakeApiServer, job_account, job_secrets, one, run_job

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


@pytest.mark.docker
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
