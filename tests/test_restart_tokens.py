"""A token seeded before the bridge restarted: refused with the reason that the bridge restarted,
over REST and MCP, and told apart from a token that was never seeded here.

Real parts: a Gym counter server (external mode, so only the bridge restarts) and the bridge in a
child process, stopped and started again on the same port with the same signing key, as
``docker compose down``/``up`` or a pod restart does. The expected reason is the issue's wording:
the session was lost because the bridge restarted. A "never seeded" token is forged here with the
deployment's own key and issuer and an issue time after the restart: only the issue time, which the
signature covers, tells the two apart.
"""

from __future__ import annotations

import time

import httpx
import jwt
import pytest

from bridge.tokens import HEADER
from tests.fixtures.bridges import SECRET, BridgeProcess, counter_row, mcp_client, refused_call


def _refusal_line(text: str) -> str:
    assert "Traceback" not in text, text
    return text


@pytest.mark.anyio
async def test_token_seeded_before_a_restart_is_lost_because_the_bridge_restarted(
    spawn_bridge, gym_upstream
) -> None:  # type: ignore[no-untyped-def]
    upstream = gym_upstream()
    args = ["--upstream-url", upstream.url, "--server-name", "counter"]
    first: BridgeProcess = spawn_bridge(args)
    seed = first.seed(counter_row(2, 3))
    token = seed["mcp"]["headers"][HEADER]
    sid = jwt.decode(token, options={"verify_signature": False})["sid"]
    async with mcp_client(seed["mcp"]["url"], token) as client:
        assert not (await client.call_tool("increment_counter", {"count": 1})).is_error
    assert first.stop() == 0
    time.sleep(1.1)  # the restarted process starts in a later second than the token's iat
    second: BridgeProcess = spawn_bridge(args, port=first.port)
    assert second.url == first.url

    # REST: a tool call and /verify
    for path, body in (("/get_counter_value", {}), ("/verify", {**counter_row(2, 3), "response": {}})):
        refused = httpx.post(f"{second.url}{path}", json=body, headers={HEADER: token}, timeout=30)
        assert refused.status_code == 409, refused.text
        detail = _refusal_line(refused.json()["detail"])
        assert "\n" not in detail
        assert "bridge restarted" in detail and sid in detail, detail
        assert "never seeded" not in detail

    # MCP: tools/call with the old token
    text = await refused_call(f"{second.url}/mcp", token)
    assert "bridge restarted" in text and sid in text, text

    # A token signed with the same key and issuer by the running process (its boot claim, read from a
    # fresh seed's token), issued after the restart, for a session that was never seeded: the plain
    # unknown-session refusal, not "restarted".
    claims = jwt.decode(token, options={"verify_signature": False})
    fresh = second.seed(counter_row(5, 5))
    boot = jwt.decode(fresh["mcp"]["headers"][HEADER], options={"verify_signature": False})["boot"]
    assert boot != claims["boot"], "each process signs its own boot id"
    now = int(time.time())
    forged = jwt.encode(
        {**claims, "sid": "0" * 32, "iat": now, "nbf": now, "exp": now + 600, "boot": boot},
        SECRET,
        algorithm="HS256",
    )
    unknown = httpx.post(f"{second.url}/get_counter_value", json={}, headers={HEADER: forged}, timeout=30)
    assert unknown.status_code == 401, unknown.text
    assert "never seeded here" in unknown.json()["detail"], unknown.text
    assert "restarted" not in unknown.json()["detail"]

    # The previous process's boot claim decides, not the issue time: issued after the restart, with
    # the old boot id, it is still a session of the process this one replaced.
    late = jwt.encode({**claims, "iat": now, "nbf": now, "exp": now + 600}, SECRET, algorithm="HS256")
    lost = httpx.post(f"{second.url}/get_counter_value", json={}, headers={HEADER: late}, timeout=30)
    assert lost.status_code == 409 and "previous process" in lost.json()["detail"], lost.text

    # A fresh session on the restarted bridge is served as usual.
    served = httpx.post(
        f"{second.url}/get_counter_value",
        json={},
        headers={HEADER: fresh["mcp"]["headers"][HEADER]},
        timeout=30,
    )
    assert served.status_code == 200 and served.json() == {"count": 5}, served.text
