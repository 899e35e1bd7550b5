"""Every replica of ``docker compose --profile replicas up --scale replica=2`` restarted in turn,
with the shipped compose.yaml's grace, while rollouts with model time run: none is lost.

Real parts: the image the container tests build, compose.yaml as shipped, a Docker engine, Gym's
counter server in each replica, and a client container on the compose network
(tests/fixtures/rolling_restart_client.py) running rollouts through the service name ``replica``
and at each session's own URL. Each replica is restarted as an operator does (``docker restart``
with compose's ``stop_grace_period``: SIGTERM, the drain, then the same container and hostname
again), one after the other, each while it holds rollouts in progress. Expected: every rollout's
reward 1.0 from Gym's counter (known increments), each replica drained (its log) and exited 0
before its restart, well within the grace.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time

import pytest
from test_compose import ROOT, Clone, clone  # noqa: F401  (clone: the fixture)
from test_compose_replica_death import replica_containers, wait_for_line, write

from tests.fixtures.containers import TIMINGS, Engine, responses_object

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

CLIENT = (ROOT / "tests" / "fixtures" / "rolling_restart_client.py").read_text()
REPLICAS, WORKERS, MODEL_S = 2, 8, 1.5


def test_every_replica_restarted_in_turn_loses_no_rollout(clone: Clone, docker_engine: Engine) -> None:  # noqa: F811
    def compose(*args: str, timeout: float = 600) -> str:
        return clone.compose("--profile", "replicas", *args, timeout=timeout).stdout

    shutil.copy(ROOT / "compose.yaml", clone.path / "compose.yaml")  # this checkout's, as it ships
    client = None
    try:
        t0 = time.monotonic()
        compose("up", "-d", "--wait", "--scale", f"replica={REPLICAS}", "replica")
        TIMINGS["compose_rolling_up_s"] = time.monotonic() - t0
        containers = replica_containers(docker_engine, clone)
        assert len(containers) == REPLICAS, containers
        key = json.loads(
            compose("exec", "-T", "--index", "1", "replica", "gym-mcp-bridge", "show-config", "--json")
        )
        grace = json.loads(compose("config", "--format", "json"))["services"]["replica"]["stop_grace_period"]
        client = docker_engine.client.containers.run(
            clone.env["GYM_MCP_BRIDGE_IMAGE"],
            entrypoint=["python", "-c", CLIENT],
            environment={
                "KEY": key["api_key"],
                "WORKERS": str(WORKERS),
                "MODEL_S": str(MODEL_S),
                "RESPONSE": json.dumps(responses_object([], "done")),
                "HOME": "/tmp",
            },
            network=f"{clone.project}_default",
            detach=True,
            labels={"gym-mcp-bridge.test": "1"},
        )
        wait_for_line(client, "STARTED ", 120)

        t1 = time.monotonic()
        for name, container in containers.items():
            time.sleep(MODEL_S)  # rollouts in progress on it: seeded, mid-call or in model time
            signalled = time.monotonic()
            container.restart(timeout=int(_seconds(grace)))  # SIGTERM, its drain, then a new process
            drained = time.monotonic() - signalled
            assert drained < 60, f"{name} took {drained:.0f}s to stop: it drains rollouts of ~5 s"
            wait_healthy(container, 240)
            log = container.logs().decode(errors="replace")
            draining = re.findall(r"SIGTERM: draining (\d+) unfinished sessions", log)
            assert draining and int(draining[-1]) > 0, (
                f"{name} held no rollout when it was stopped:\n{log[-3000:]}"
            )
            assert "drained in" in log and "they are lost" not in log, log[-3000:]
        TIMINGS["compose_rolling_restarts_s"] = time.monotonic() - t1

        write(client, "/tmp/stop", {})
        done = wait_for_line(client, "DONE ", 300)["outcomes"]
        assert client.wait(timeout=60)["StatusCode"] == 0, client.logs().decode()[-3000:]
        lost = [outcome for outcome in done if outcome != "exact"]
        assert not lost, lost
        assert len(done) >= 2 * WORKERS, done  # rollouts ran through both restarts
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.remove(force=True)
        clone.compose("--profile", "replicas", "down", "--timeout", "30", check=False)


def _seconds(duration: str) -> float:
    minutes, _, seconds = duration.rstrip("s").partition("m")
    return 60 * float(minutes or 0) + float(seconds or 0)


def wait_healthy(container: object, timeout: float) -> None:
    """Until compose's healthcheck (``/readyz``) passes on the restarted container."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        container.reload()  # type: ignore[attr-defined]
        if container.attrs["State"].get("Health", {}).get("Status") == "healthy":  # type: ignore[attr-defined]
            return
        time.sleep(0.5)
    raise AssertionError(f"not healthy after its restart:\n{container.logs().decode()[-3000:]}")  # type: ignore[attr-defined]
