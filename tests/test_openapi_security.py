"""``/openapi.json`` says how to authenticate and what the bridge answers, for the running bridge.

- The session token (``X-NeMo-Gym-Session-Token``, or the bridge's cookie) is a security scheme,
  optional on the routes that act on a session; a bridge with an ``api_key`` adds the key as HTTP
  Bearer and as HTTP Basic (the key as the password) and requires it on every route.
- Each status a real refusal comes back with (401, 403, 409, 400, ...) is documented on its route,
  and its body validates against the schema the document declares for it; a method a route does not
  serve gets 405 with the ``Allow`` header RFC 9110 requires (Schemathesis found it missing).
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import jsonschema

from tests.fixtures.bridges import HEADER, BridgeProcess, UpstreamProcess
from tests.fixtures.helpers import seed, tools_row

KEY = "openapi-test-key-0123456789abcdef0123"


def _document(bridge: BridgeProcess, **headers: str) -> dict[str, Any]:
    response = httpx.get(f"{bridge.url}/openapi.json", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _conforms(document: dict[str, Any], path: str, response: httpx.Response) -> None:
    """``response`` (a refusal on ``POST path``) has a status the document lists for that route, and
    a body valid under the schema given there."""
    declared = document["paths"][path]["post"]["responses"]
    assert str(response.status_code) in declared, (path, response.status_code, sorted(declared))
    schema = declared[str(response.status_code)]["content"]["application/json"]["schema"]
    resolver = {**schema, "components": document["components"]}
    jsonschema.validate(response.json(), resolver)
    assert response.json()["detail"] and "\n" not in response.json()["detail"]


def test_session_token_scheme_and_the_statuses_real_refusals_come_back_with(
    counter_bridge: BridgeProcess,
) -> None:
    bridge = counter_bridge  # no api_key: only the session token is a scheme
    document = _document(bridge)
    schemes = document["components"]["securitySchemes"]
    assert schemes["sessionToken"]["type"] == "apiKey"
    assert (schemes["sessionToken"]["in"], schemes["sessionToken"]["name"]) == ("header", HEADER)
    assert (schemes["sessionCookie"]["in"], schemes["sessionCookie"]["name"]) == (
        "cookie",
        "gym_mcp_bridge_session",
    )
    assert "apiKeyBearer" not in schemes and "apiKeyBasic" not in schemes
    operations = {path: item["post"] for path, item in document["paths"].items()}
    assert operations["/seed_session"]["security"] == [{}]
    for path in ("/verify", "/increment_counter", "/get_counter_value"):
        assert {"sessionToken": []} in operations[path]["security"] and {} in operations[path]["security"]
    for path, operation in operations.items():  # every route: the guards' and the upstream's statuses
        assert {"400", "413", "502", "503", "504"} <= set(operation["responses"]), path
    assert "Retry-After" in operations["/seed_session"]["responses"]["503"]["headers"]

    url = bridge.url
    only_increment = seed(bridge, tools_row("increment_counter"))
    _conforms(document, "/verify", httpx.post(f"{url}/verify", content=b"{not json", timeout=10))
    forged = httpx.post(f"{url}/increment_counter", json={"count": 1}, headers={HEADER: "forged"}, timeout=10)
    assert forged.status_code == 401
    _conforms(document, "/increment_counter", forged)
    outside = httpx.post(f"{url}/get_counter_value", json={}, headers={HEADER: only_increment}, timeout=10)
    assert outside.status_code == 403
    _conforms(document, "/get_counter_value", outside)
    token = seed(bridge)
    closed = httpx.post(f"{url}/close_session", json={}, headers={HEADER: token}, timeout=10)
    assert closed.status_code == 200, closed.text
    ended = httpx.post(f"{url}/increment_counter", json={"count": 1}, headers={HEADER: token}, timeout=10)
    assert ended.status_code == 409
    _conforms(document, "/increment_counter", ended)
    for path in document["paths"]:  # a method the document has no operation for: 405 naming POST
        other = httpx.request("TRACE", f"{url}{path}", timeout=10)
        assert other.status_code == 405 and other.headers.get("allow") == "POST", (path, other.headers)


def test_api_key_schemes_are_declared_and_required_where_the_bridge_has_a_key(
    spawn_bridge: Any, counter_upstream: UpstreamProcess
) -> None:
    bridge = spawn_bridge(["--upstream-url", counter_upstream.url], env={"GYM_MCP_BRIDGE_API_KEY": KEY})
    assert httpx.get(f"{bridge.url}/openapi.json", timeout=10).status_code == 401
    basic = "Basic " + base64.b64encode(f"anyone:{KEY}".encode()).decode()
    document = _document(bridge, authorization=basic)
    assert _document(bridge, authorization=f"Bearer {KEY}") == document
    schemes = document["components"]["securitySchemes"]
    assert (schemes["apiKeyBearer"]["type"], schemes["apiKeyBearer"]["scheme"]) == ("http", "bearer")
    assert (schemes["apiKeyBasic"]["type"], schemes["apiKeyBasic"]["scheme"]) == ("http", "basic")
    for path, item in document["paths"].items():
        operation = item["post"]
        assert operation["security"], path
        for alternative in operation["security"]:  # no way in without the key
            assert "apiKeyBearer" in alternative or "apiKeyBasic" in alternative, (path, alternative)
        assert "401" in operation["responses"], path
    for path in ("/seed_session", "/increment_counter"):
        refused = httpx.post(f"{bridge.url}{path}", json={}, timeout=10)
        assert refused.status_code == 401
        _conforms(document, path, refused)
