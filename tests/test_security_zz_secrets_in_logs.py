"""Secrets never logged: runs late (file order) and greps the logs of every bridge of this test run
(``log_dir``) for every signing key, API key and session token the tests handed out or forged."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import HEADER, counter_row
from tests.fixtures.helpers import (
    ALL_SECRETS,
    API_KEY,
    JWT_PREFIX,
    OTHER_KEY,
    claims_of,
    external_bridge,
    forge,
    shared_fault_bridge,
    upstream_url,
)


def test_no_secret_or_token_in_any_bridge_log(log_dir: Path) -> None:
    # one more bridge at debug level, fed every kind of refusal and failure, so its log is as verbose
    # as the bridge gets
    upstream = upstream_url(shared_fault_bridge(log_dir))
    bridge = external_bridge(log_dir, upstream, "--log-level", "debug", "--api-key", API_KEY)
    auth = {"authorization": f"Bearer {API_KEY}"}
    seeded = httpx.post(f"{bridge.url}/seed_session", json=counter_row(0), headers=auth, timeout=30)
    token = seeded.json()["mcp"]["headers"][HEADER]
    bad = forge(claims_of(token), key=OTHER_KEY)
    for headers in ({HEADER: token}, {HEADER: bad}, {HEADER: token + "x"}, {}):
        httpx.post(f"{bridge.url}/fail_500", json={}, headers={**auth, **headers}, timeout=10)
        httpx.post(f"{bridge.url}/close_connection", json={}, headers={**auth, **headers}, timeout=10)
        httpx.post(f"{bridge.url}/verify", json={"response": 1}, headers={**auth, **headers}, timeout=10)
    httpx.post(
        f"{bridge.url}/seed_session", json={}, headers={"authorization": "Bearer wrong-key"}, timeout=10
    )
    bridge.stop()
    logs = sorted(log_dir.glob("*.log"))
    assert bridge.log_path in logs and len(logs) >= 2
    leaks = []
    for path in logs:
        text = path.read_text(errors="replace")
        for secret in (*ALL_SECRETS, token, bad):
            if secret in text:
                leaks.append(f"{path.name}: a secret or token ({secret[:6]}...)")
        if JWT_PREFIX in text:
            leaks.append(f"{path.name}: something shaped like a session token")
    assert leaks == [], leaks
