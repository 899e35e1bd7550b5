"""A replica dies during a call: ``docker compose --profile replicas up --scale replica=3`` on a real
Docker engine, from a fresh clone, played as an operator and a harness fleet would.

One compose up serves every check:

1. The key race on the shared volume: the project starts from nothing (``down -v``), so the three
   replicas race to create the signing key and the API key on the named volume. Exactly one of them
   generated each key, every replica's ``show-config`` prints the same API key, each replica takes
   it, and a token of any replica is honoured by every other (each session's first three calls go
   through the three replicas).
2. A client container on the compose network (tests/fixtures/replica_death_client.py, the official
   MCP SDK client and httpx) seeds sessions through the service name ``replica`` until every replica
   owns three, and calls them as harnesses do: MCP at the seed answer's URL, MCP and REST with the
   session token through other replicas.
3. One replica dies with calls in flight, for certain: it is paused (``docker pause``), its sessions
   get four calls each (REST and MCP through other replicas, MCP at its own URL, a /verify), the
   test waits until every one of them sits unread in the paused replica's sockets
   (``/proc/<pid>/net/tcp``), while every other session runs rounds of calls that never touch it;
   then it is killed. Each hanging call gets an error at once -- through another replica a 502 or an
   MCP error naming the owner, at the owner's own URL the SDK client's transport error -- and never a
   reward; after DNS dropped it every request of its sessions through the service name is a 502
   naming it; every other session's counter is exact (known increments, read back) and its verify
   scores 1.0 for the right count.
4. The killed replica restarted by compose (``up -d --wait --scale replica=3``): the same container
   and hostname, the same keys (it generated none; other replicas' sessions, finished by their
   verify, are served through it: a repeated verify scores 1.0 for the right count and 0.0 for
   another, a tool call is refused naming the finish; a new session of its own works through the
   others), and its own old sessions refused as lost (409 ``session lost``, MCP too), not re-created.
5. The upstream's own errors in ``docker compose logs``: a /verify with a structured-output response
   makes the Gym server itself fail (see tests/test_upstream_log.py); its report shows at WARNING as
   ``[upstream]`` lines. The logs hold that one upstream traceback and no other, none of the bridge's
   own, the forwarders' warnings naming the dead owner, and no key or token.

Expected values: counters from the seeded initial counts and the increments sent (1+2+3 over REST,
4 over MCP, rounds of 5+6, then 8 and 9), the refusal texts of docs/deployment.md.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from test_compose import Clone, claims_of, clone, one_line  # noqa: F401  (clone: the fixture)
from test_upstream_log import structured_output_response

from tests.fixtures.containers import TIMINGS, Engine, responses_object

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1500)]

CLIENT = (Path(__file__).parent / "fixtures" / "replica_death_client.py").read_text()
REPLICAS, PER_REPLICA, ROUNDS = 3, 3, 4
# What the MCP SDK client raises when the server it called dies with the call open (the session's
# own URL): its transport's error (httpx2's ReadError, or the SDK's "Connection closed").
TRANSPORT_ERROR = r"ReadError|RemoteProtocolError|Connection closed"
CALLS_PER_LOST_SESSION = 4  # REST and MCP through another replica, MCP at its own URL, a /verify


def test_compose_replica_dies_during_calls(clone: Clone, docker_engine: Engine) -> None:  # noqa: F811
    def compose(*args: str, timeout: float = 600) -> str:
        return clone.compose("--profile", "replicas", *args, timeout=timeout).stdout

    client = None
    try:
        compose("down", "-v", "--timeout", "30")  # a fresh volume: the replicas race to make the keys
        t0 = time.monotonic()
        compose("up", "-d", "--wait", "--scale", f"replica={REPLICAS}", "replica")
        TIMINGS["compose_replicas_up_to_healthy_s"] = time.monotonic() - t0
        containers = replica_containers(docker_engine, clone)
        assert len(containers) == REPLICAS, containers

        # 1. the key race: one generator per key, one API key, taken by each replica
        startup = compose("logs", "--no-color", "replica")
        for what in ("signing key", "REST API key"):
            assert len(re.findall(rf"{what}: \S+ \(generated on this first start\)", startup)) == 1, startup
            assert len(re.findall(rf"{what}: \S+ \(kept from an earlier start\)", startup)) == 2, startup
        shown = [
            json.loads(
                compose("exec", "-T", "--index", str(i), "replica", "gym-mcp-bridge", "show-config", "--json")
            )
            for i in range(1, REPLICAS + 1)
        ]
        assert len({s["api_key"] for s in shown}) == 1, shown
        key = shown[0]["api_key"]

        client = docker_engine.client.containers.run(
            clone.env["GYM_MCP_BRIDGE_IMAGE"],
            entrypoint=["python", "-c", CLIENT],
            environment={
                "KEY": key,  # each replica must take it: seeds and calls on every one are REST
                "REPLICAS": str(REPLICAS),
                "PER_REPLICA": str(PER_REPLICA),
                "ROUNDS": str(ROUNDS),
                "RESPONSE": json.dumps(responses_object([], "done")),
                "BAD_RESPONSE": json.dumps(structured_output_response()),
                "HOME": "/tmp",
            },
            network=f"{clone.project}_default",
            detach=True,
            labels={"gym-mcp-bridge.test": "1"},
        )

        # 2. sessions on every replica, each token honoured by every replica
        seeded = wait_for_line(client, "SEEDED ", 300)
        sessions, advertised = seeded["sessions"], seeded["advertised"]
        assert len(seeded["addrs"]) == REPLICAS, seeded["addrs"]
        for url in advertised.values():  # each replica advertises its own container hostname
            assert host_of(url) in containers, (url, list(containers))
        owned = {url: [i for i, s in enumerate(sessions) if s["owner"] == url] for url in advertised.values()}
        assert all(len(owned[url]) >= PER_REPLICA for url in owned), owned
        for s in sessions:
            assert claims_of(s["token"])["iss"] == s["owner"] and s["url"] == f"{s['owner']}/mcp", s
            assert s["value"] == {"count": s["initial"] + 10}, s  # 1+2+3 through each replica, 4 over MCP

        # 3. the victim paused, its calls hanging on it; the others' calls never touch it
        victim_url = advertised[seeded["addrs"][0]]
        victim = containers[host_of(victim_url)]
        lost, kept = owned[victim_url], [i for i in range(len(sessions)) if i not in owned[victim_url]]
        victim.pause()
        victim.reload()
        assert victim.status == "paused", victim.status
        write(client, "/tmp/go", {"victim": victim_url})
        stream = wait_for_line(client, "STREAM ", 300)
        expected_hanging = CALLS_PER_LOST_SESSION * len(lost)
        assert stream["hanging"] == expected_hanging and stream["answered_while_paused"] == [], stream
        wait_pending(int(victim.attrs["State"]["Pid"]), expected_hanging, 30)
        for i in kept:  # every round answered while the victim was paused
            assert stream["kept"][str(i)] == [[200, {"success": True}], ["ok", {"success": True}]] * ROUNDS

        victim.kill()
        write(client, "/tmp/killed", {})
        killed = wait_for_line(client, "KILLED ", 300)
        assert len(killed["alive"]) == REPLICAS - 1, killed["alive"]
        kinds: dict[str, int] = {}
        for i, kind, result, seconds in killed["hanging"]:
            assert i in lost and seconds < 20, (i, kind, result, seconds)  # ended by the kill, no timeout
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind in ("rest", "verify"):  # through another replica: 502 naming the owner, no reward
                status, body = result
                assert status == 502 and victim_url in one_line(body["detail"]), (kind, result)
                assert "reward" not in body
            elif kind == "mcp_via":  # the forwarder's JSON-RPC error, raised by the SDK
                assert result[0] == "error" and f"owner replica {victim_url}" in result[1], result
            else:  # at the owner's own URL: the owner is gone, the SDK's transport says so
                assert result[0] == "error" and re.search(TRANSPORT_ERROR, result[1]), result
        assert kinds == {k: len(lost) for k in ("rest", "mcp_via", "mcp_own", "verify")}, kinds
        total = {i: sessions[i]["initial"] + 10 + 11 * ROUNDS + 8 for i in kept}
        for i, steps in killed["after"].items():
            i = int(i)
            if i in lost:  # every request of a lost session through the service: 502 naming its owner
                for status, body in (steps[0], steps[1], steps[3]):
                    assert status == 502 and victim_url in one_line(body["detail"]), steps
                    assert "unreachable" in body["detail"] and "reward" not in body
                assert steps[2][0] == "error" and f"owner replica {victim_url}" in steps[2][1], steps[2]
            else:
                assert steps[0] == [200, {"success": True}], steps
                assert steps[1] == [200, {"count": total[i]}], steps
                assert steps[2] == ["ok", {"count": total[i]}], steps[2]
                assert steps[3][0] == 200 and steps[3][1]["reward"] == 1.0, steps[3]

        # 4. the victim restarted by compose: same container, same keys, its old sessions lost
        t1 = time.monotonic()
        compose("up", "-d", "--wait", "--scale", f"replica={REPLICAS}", "replica")
        TIMINGS["compose_replica_restart_to_healthy_s"] = time.monotonic() - t1
        victim.reload()
        assert victim.status == "running" and set(replica_containers(docker_engine, clone)) == set(containers)
        write(client, "/tmp/restarted", {})
        back = wait_for_line(client, "RESTARTED ", 300)
        assert client.wait(timeout=120)["StatusCode"] == 0, client.logs().decode()[-3000:]
        for i, steps in back["back"].items():
            i = int(i)
            if i in lost:
                sid = claims_of(sessions[i]["token"])["sid"]
                for status, body in steps[:3]:  # at the owner and through another replica alike
                    detail = one_line(body["detail"])
                    assert status == 409 and "session lost" in detail and sid in detail, steps
                    assert "reward" not in body
                assert steps[3][0] in ("error", "tool_error") and "session lost" in steps[3][1], steps[3]
                assert sid in steps[3][1], steps[3]
            else:  # through the restarted replica, forwarded to the owner: finished at its verify
                assert steps[0][0] == 409 and "its tools no longer run" in steps[0][1]["detail"], steps
                assert steps[1][0] == 200 and steps[1][1]["reward"] == 1.0, steps[1]  # verify, repeated
                assert steps[2][0] == 200 and steps[2][1]["reward"] == 0.0, steps[2]
                assert steps[3][0] == "tool_error" and "its tools no longer run" in steps[3][1], steps[3]
        status, url, *through_others = back["new"]  # a new session on the restarted replica
        assert status == 200 and url == f"{victim_url}/mcp", back["new"]
        assert through_others == [[200, {"success": True}]] * (REPLICAS - 1) + [[200, {"count": 7 + 2}]]

        # 5. the upstream's own error, and what the logs hold
        failing, (status, body) = back["bad_verify"]
        assert failing in kept and status == 500 and "validation errors for BaseVerifyResponse" in str(body)
        assert "reward" not in str(body)
        logs = compose("logs", "--no-color", "replica")
        check_logs(logs, key, [s["token"] for s in sessions], victim_url)
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.remove(force=True)
        clone.compose("--profile", "replicas", "down", "--timeout", "30", check=False)


def check_logs(logs: str, key: str, tokens: list[str], victim_url: str) -> None:
    """The replicas' logs: the upstream's one error report at WARNING and no other traceback, none
    from the bridge itself; the forwarders naming the dead owner; the restart generated no key; no
    key or token."""
    lines = logs.splitlines()
    upstream = [line for line in lines if " gym_mcp_bridge.upstream: [upstream] " in line]
    reports = [line for line in upstream if "Caught an exception printed above" in line]
    assert len(reports) == 1 and " WARNING " in reports[0], reports
    assert any(" WARNING " in line and "ValidationError: 3 validation errors" in line for line in upstream)
    tracebacks = [line for line in lines if "Traceback" in line]
    assert tracebacks and all(line in upstream and " WARNING " in line for line in tracebacks), tracebacks
    assert len(tracebacks) == 3, tracebacks  # the one report: an exception group, its member, the cause
    assert any(f"owner replica {victim_url} of this session is unreachable" in line for line in lines)
    for what in ("signing key", "REST API key"):
        assert len(re.findall(rf"{what}: \S+ \(generated on this first start\)", logs)) == 1
        assert len(re.findall(rf"{what}: \S+ \(kept from an earlier start\)", logs)) == REPLICAS
    assert key not in logs, "the API key was written to the logs"
    assert not any(token in logs for token in tokens), "a session token was written to the logs"


def replica_containers(engine: Engine, box: Clone) -> dict[str, Any]:
    """The project's running replica containers by hostname (what each advertises)."""
    found = engine.client.containers.list(
        filters={"label": [f"com.docker.compose.project={box.project}", "com.docker.compose.service=replica"]}
    )
    return {c.attrs["Config"]["Hostname"]: c for c in found}


def host_of(url: str) -> str:
    return url.removeprefix("http://").removesuffix(":8000")


def write(container: Any, path: str, data: dict[str, Any]) -> None:
    """A file in the client container (written whole, then moved into place)."""
    text = json.dumps(data).replace("'", "'\\''")
    code, out = container.exec_run(["sh", "-c", f"printf '%s' '{text}' > {path}.tmp && mv {path}.tmp {path}"])
    assert code == 0, out


def pending_requests(pid: int) -> int:
    """Connections to port 8000 in the network namespace of ``pid`` holding bytes nobody has read:
    requests waiting on a paused bridge (accepted or still in the listen queue)."""
    count = 0
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = row.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                rx_queue = int(fields[4].split(":")[1], 16)
                if local_port == 8000 and fields[3] == "01" and rx_queue > 0:
                    count += 1
    return count


def wait_pending(pid: int, expected: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    seen = pending_requests(pid)
    while seen < expected and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = pending_requests(pid)
    assert seen >= expected, f"{seen} requests waiting on the paused replica, {expected} expected"


def wait_for_line(container: Any, prefix: str, timeout: float) -> dict[str, Any]:
    """The JSON of the client container's first stdout line starting with ``prefix``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        for line in out.splitlines():
            if line.startswith(prefix):
                return dict(json.loads(line[len(prefix) :]))
        container.reload()
        if container.status in ("exited", "dead"):
            break
        time.sleep(0.5)
    raise AssertionError(
        f"no {prefix.strip()} line from the client container:\n{container.logs().decode()[-6000:]}"
    )
