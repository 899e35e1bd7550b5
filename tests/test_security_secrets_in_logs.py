"""Secrets never logged, and secrets passed where ``ps`` shows them are warned about.

Each test starts its own bridges and feeds them every kind of refusal and failure at debug level,
then greps their logs for every signing key, API key and session token handed out or forged. Logs
of other bridges of this run that already exist in ``log_dir`` are grepped too (a leak anywhere is
a leak), but nothing here depends on which tests ran before.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import jwt

from tests.fixtures.bridges import HEADER, SECRET, BridgeProcess, counter_row, upstream_url
from tests.fixtures.helpers import (
    ALL_SECRETS,
    API_KEY,
    JWT_PREFIX,
    OTHER_KEY,
    ROTATED_KEY,
    claims_of,
    external_bridge,
    forge,
    mcp_post,
    rpc_call,
    shared_fault_bridge,
)

FLAG_WARNING = "given on the command line"


def leaks_in(paths: list[Path], secrets: tuple[str, ...]) -> list[str]:
    found = []
    for path in paths:
        text = path.read_text(errors="replace")
        for secret in secrets:
            if secret in text:
                found.append(f"{path.name}: a secret or token ({secret[:6]}...)")
        if JWT_PREFIX in text:
            found.append(f"{path.name}: something shaped like a session token")
    return found


def exercise(bridge: BridgeProcess, auth: dict[str, str]) -> tuple[str, str]:
    """Seed a session and send it every kind of refusal and failure; (token, forged token)."""
    seeded = httpx.post(f"{bridge.url}/seed_session", json=counter_row(0), headers=auth, timeout=30)
    assert seeded.status_code == 200, seeded.text
    token = seeded.json()["mcp"]["headers"][HEADER]
    bad = forge(claims_of(token), key=OTHER_KEY)
    for headers in ({HEADER: token}, {HEADER: bad}, {HEADER: token + "x"}, {}):
        httpx.post(f"{bridge.url}/fail_500", json={}, headers={**auth, **headers}, timeout=10)
        httpx.post(f"{bridge.url}/close_connection", json={}, headers={**auth, **headers}, timeout=10)
        httpx.post(f"{bridge.url}/verify", json={"response": 1}, headers={**auth, **headers}, timeout=10)
    for sent in (token, bad, token + "x"):
        mcp_post(bridge, rpc_call("fail_500", {}), sent)
        mcp_post(bridge, rpc_call("no_such_tool", {}), sent)
    httpx.post(f"{bridge.url}/close_session", json={}, headers={**auth, HEADER: token}, timeout=10)
    mcp_post(bridge, rpc_call("increment_counter", {"count": 1}), token)  # closed session
    httpx.post(
        f"{bridge.url}/seed_session", json={}, headers={"authorization": "Bearer wrong-key"}, timeout=10
    )
    return token, bad


def test_no_secret_or_token_in_bridge_logs(log_dir: Path) -> None:
    # the managed fault bridge (debug level, its upstream's output in its log) and an external one
    # with rotated signing keys and an API key, both fed every kind of refusal and failure
    managed = shared_fault_bridge(log_dir)
    bridge = external_bridge(
        log_dir,
        upstream_url(managed),
        "--log-level",
        "debug",
        GYM_MCP_BRIDGE_SECRET=f"{ROTATED_KEY},{SECRET}",
        GYM_MCP_BRIDGE_API_KEY=API_KEY,
    )
    tokens = [*exercise(managed, {}), *exercise(bridge, {"authorization": f"Bearer {API_KEY}"})]
    bridge.stop()
    own = [p for p in (managed.log_path, bridge.log_path) if p is not None]
    assert len(own) == 2 and all(p.stat().st_size > 0 for p in own)
    others = [p for p in sorted(log_dir.glob("*.log")) if p not in own]
    assert leaks_in(own + others, (*ALL_SECRETS, *tokens)) == []


def test_secrets_given_as_flags_warn_once_and_env_does_not(log_dir: Path) -> None:
    upstream = upstream_url(shared_fault_bridge(log_dir))
    flagged = external_bridge(log_dir, upstream, "--secret", ROTATED_KEY, "--api-key", API_KEY)
    from_env = external_bridge(log_dir, upstream, GYM_MCP_BRIDGE_API_KEY=API_KEY)  # secret: env too
    try:
        auth = {"authorization": f"Bearer {API_KEY}"}
        seeded = httpx.post(f"{flagged.url}/seed_session", json=counter_row(0), headers=auth, timeout=30)
        assert seeded.status_code == 200, seeded.text  # --api-key is in effect
        token = seeded.json()["mcp"]["headers"][HEADER]
        jwt.decode(token, ROTATED_KEY, algorithms=["HS256"], options={"verify_aud": False})  # --secret signs
        warnings = [line for line in flagged.log().splitlines() if FLAG_WARNING in line]
        assert len(warnings) == 1, flagged.log()
        (warning,) = warnings
        assert "WARNING" in warning and "--secret, --api-key" in warning
        for remedy in ("GYM_MCP_BRIDGE_SECRET", "--secret-file", "GYM_MCP_BRIDGE_API_KEY", "--api-key-file"):
            assert remedy in warning, remedy
        assert FLAG_WARNING not in from_env.log()
    finally:
        flagged.stop()
        from_env.stop()
    assert leaks_in([p for p in (flagged.log_path, from_env.log_path) if p], (*ALL_SECRETS, token)) == []
