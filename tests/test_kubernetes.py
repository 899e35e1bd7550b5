"""Kubernetes without files to make: the manifests' URLs and Host lists free of any cluster domain, as
the bridge itself evaluates them; the documented key rotations, run; and two pods of the StatefulSet
run for real (``test_two_pods_through_a_port_forward``): the bridge with the environment the kubelet
makes from the manifest, the `.svc` names of the pods in a private /etc/hosts each, the keys made by
the key Job's script against the API server double (tests/fixtures/kube.py), reached from "outside"
through a TCP tunnel as ``kubectl port-forward`` gives it. The Job itself: tests/test_kubernetes_keys.py.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kube import (
    K8S,
    NS,
    ROOT,
    FakeApiServer,
    job_account,
    job_secrets,
    kubectl,
    one,
    run_job,
    time_left,
)

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
    from bridge.http.guard import AllowList, rebinding_protection
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

    allowed = AllowList(rebinding_protection(settings, settings.host, advertise).allowed_hosts or [])
    for host in (
        "localhost:8000",  # kubectl port-forward svc/gym-mcp-bridge 8000:8000
        "127.0.0.1:8000",
        "gym-mcp-bridge:8000",  # the seed Service, from the same namespace
        f"gym-mcp-bridge.{namespace}:8000",
        f"gym-mcp-bridge.{namespace}.svc:8000",  # from any namespace, any cluster domain
        f"gym-mcp-bridge-0.gym-mcp-bridge-headless.{namespace}.svc:8000",  # mcp.url, and forwarded requests
    ):
        assert host in allowed, host
    for host in ("evil.example:8000", f"gym-mcp-bridge-1.gym-mcp-bridge-headless.{namespace}.svc:8000"):
        assert host not in allowed, host


def test_the_docs_name_the_service_as_the_manifests_accept_it(docs: list[dict[str, Any]]) -> None:
    """The Kubernetes instance block of docs/clients.md reaches the seed Service by a name its
    allow-list accepts, on any cluster domain."""
    from bridge.http.guard import AllowList, rebinding_protection
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
    security = rebinding_protection(settings, settings.host, env["GYM_MCP_BRIDGE_ADVERTISE_URL"])
    allowed = AllowList(security.allowed_hosts or [])
    for url in urls:
        host = url.removeprefix("http://").split("/")[0]
        assert "cluster.local" not in host
        assert host in allowed, host


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

    from benchmarks.procs import free_port
    from tests.fixtures.bridges import GYM_PYTHON, boot_upstream, wait_for_upstream
    from tests.fixtures.containers import SEED_ROW, TOKEN_HEADER, mcp_call, responses_object, result_json

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
