"""``/ng-rollout/<id>/`` is routed exactly as nemo-gym 0.7.0's ``RolloutContextMiddleware`` routes it.

Expected values come from Gym's own middleware: ``tests/fixtures/gym07/middleware_routes.py`` runs
under the nemo-gym 0.7.0 interpreter (``make gym-env NEMO_GYM_VERSION=0.7.0``, the ``gym07_python``
fixture), wraps Gym's middleware around an ASGI app that records the path it is handed and Gym's
``current_rollout_id()``, and drives it with one scope per request target of ``TARGETS``. The
scopes are built as uvicorn builds them (``httptools_impl.on_headers_complete``): ``raw_path`` the
bytes of the request target, ``path`` those bytes percent-decoded (``urllib.parse.unquote``). The
bridge's ``prefixes.strip`` gets the same scopes; for every target the routed path and rollout id
must be Gym's. Where Gym's pattern does not match, Gym hands the path to its app unchanged (no Gym
route has a second segment: 404); the bridge must leave the path as it was, carry no id, and refuse
(its own 404) exactly the targets under ``/ng-rollout/``.

Then over real HTTP, against a Gym 0.7.0 server (``tests/test_gym07.py``'s rollout-echo server) and
the bridge in front of it: long ids and a final ``%0A`` reach the route Gym's server routes them to,
the upstream sees the id whole, the audit log keeps it bounded and the provenance whole. uvicorn's
httptools parser narrows the corpus there, on Gym's server and the bridge alike: a line break
reaches a path only percent-encoded (a raw one in the request line is a 400), and a request target
is at most 65535 bytes (the 100000-character id is a 400 before any routing; it is in the table for
ASGI servers without that cap).
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from bridge.http import prefixes
from tests import test_gym07
from tests.fixtures.bridges import HEADER, ROOT, BridgeProcess, counter_row
from tests.fixtures.helpers import MCP_HEADERS
from tests.test_gym07 import CALL, raw_post, response_with, without

SCRIPT = ROOT / "tests" / "fixtures" / "gym07" / "middleware_routes.py"
LONG = {n: "a" * (n - 1) + "Z" for n in (128, 129, 1000, 100_000)}

# request targets as they appear on the wire (percent-encoded where a byte needs it)
TARGETS: dict[str, str] = {
    "plain": "/ng-rollout/7-3/seed_session",
    "a tool": "/ng-rollout/7-3/increment_counter",
    "id of 128": f"/ng-rollout/{LONG[128]}/seed_session",
    "id of 129": f"/ng-rollout/{LONG[129]}/seed_session",
    "id of 1000": f"/ng-rollout/{LONG[1000]}/verify",
    "id of 100000": f"/ng-rollout/{LONG[100_000]}/seed_session",
    "id of 100000, trailing line break": f"/ng-rollout/{LONG[100_000]}/seed_session%0A",
    "trailing line break": "/ng-rollout/abc/seed_session%0A",
    "two trailing line breaks": "/ng-rollout/abc/seed_session%0A%0A",
    "trailing CR LF": "/ng-rollout/abc/seed_session%0D%0A",
    "trailing CR": "/ng-rollout/abc/seed_session%0D",
    "trailing vertical tab": "/ng-rollout/abc/seed_session%0B",
    "trailing U+2028": "/ng-rollout/abc/seed_session%E2%80%A8",
    "line break mid-path": "/ng-rollout/abc/seed%0A_session",
    "line break in the id": "/ng-rollout/abc%0A/seed_session",
    "line break after the id": "/ng-rollout/abc%0A",
    "line break as the route": "/ng-rollout/abc/%0A",
    "two line breaks in the id": "/ng-rollout/x%0A%0A/seed_session",
    "encoded slash in the id": "/ng-rollout/a%2Fb/seed_session",
    "encoded slash dot-dot": "/ng-rollout/a%2F..%2Fb/seed_session",
    "encoded slash ending the id": "/ng-rollout/x%2F/seed_session",
    "dot-dot": "/ng-rollout/../seed_session",
    "encoded dot-dot": "/ng-rollout/%2e%2e/seed_session",
    "leading dot": "/ng-rollout/.hidden/seed_session",
    "leading dash": "/ng-rollout/-lead/seed_session",
    "leading underscore": "/ng-rollout/_lead/seed_session",
    "dots, underscores, dashes": "/ng-rollout/a.b_c-d/seed_session",
    "double dot inside": "/ng-rollout/a..b/seed_session",
    "encoded letter": "/ng-rollout/%41bc/seed_session",
    "non-ASCII id": "/ng-rollout/%C3%A9t%C3%A9/seed_session",
    "fullwidth letter id": "/ng-rollout/%EF%BC%A1/seed_session",
    "Arabic-Indic digit id": "/ng-rollout/%D9%A1/seed_session",
    "non-ASCII route": "/ng-rollout/abc/%C3%A9t%C3%A9",
    "invalid UTF-8 in the route": "/ng-rollout/abc/seed_session%FF",
    "invalid percent escape": "/ng-rollout/abc/%ZZ",
    "NUL in the id": "/ng-rollout/a%00b/seed_session",
    "space in the id": "/ng-rollout/a%20b/seed_session",
    "encoded CRLF header injection": "/ng-rollout/a%0d%0aX-Injected:%201/seed_session",
    "encoded question mark": "/ng-rollout/abc/seed_session%3Fq=1",
    "empty id": "/ng-rollout//seed_session",
    "no route after the id": "/ng-rollout/x",
    "slash after the id": "/ng-rollout/x/",
    "prefix alone": "/ng-rollout/",
    "prefix without slash": "/ng-rollout",
    "double slash after the id": "/ng-rollout/x//seed_session",
    "trailing slash on the route": "/ng-rollout/x/seed_session/",
    "nested prefix": "/ng-rollout/x/ng-rollout/y/seed_session",
    "upper case prefix": "/NG-ROLLOUT/x/seed_session",
    "leading double slash": "//ng-rollout/x/seed_session",
    "mcp under the prefix": "/ng-rollout/x/mcp",
    "mcp with a slash under the prefix": "/ng-rollout/x/mcp/",
    "mcp sub-path under the prefix": "/ng-rollout/x/mcp/extra",
    "mcp": "/mcp",
    "mcp with a slash": "/mcp/",
    "bare route": "/seed_session",
    "root": "/",
}


def uvicorn_scope(target: str) -> dict[str, Any]:
    """The ASGI scope uvicorn's httptools protocol builds for a request target."""
    return {
        "type": "http",
        "method": "POST",
        "path": unquote(target),  # httptools_impl: raw_path.decode("ascii"), unquote'd when it has a %
        "raw_path": target.encode("ascii"),
        "query_string": b"",
        "headers": [],
    }


@pytest.fixture(scope="module")
def gym_routes(gym07_python: Path) -> dict[str, dict[str, Any]]:
    """What Gym's middleware handed its app, per case of ``TARGETS``."""
    scopes = [uvicorn_scope(target) for target in TARGETS.values()]
    given = [{"path": s["path"], "raw_path": s["raw_path"].decode("latin-1")} for s in scopes]
    done = subprocess.run(
        [str(gym07_python), str(SCRIPT)],
        input=json.dumps(given),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tempfile.gettempdir(),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(zip(TARGETS, json.loads(done.stdout), strict=True))


def bridge_route(scope: dict[str, Any], mount: str = "") -> tuple[str, str | None, bool]:
    """(routed path, rollout id, refused) as the bridge's guard sees them after ``strip``."""
    routed, refusal = prefixes.strip(scope, mount)
    return routed["path"], prefixes.rollout_id(routed), refusal is not None


@pytest.mark.parametrize("case", list(TARGETS))
def test_the_bridge_routes_every_path_as_gyms_middleware(
    case: str, gym_routes: dict[str, dict[str, Any]]
) -> None:
    target, gym = TARGETS[case], gym_routes[case]
    scope = uvicorn_scope(target)
    path, rollout, refused = bridge_route(scope)
    assert (path, rollout) == (gym["path"], gym["rollout_id"])
    passed_through = gym["rollout_id"] is None
    assert passed_through == (gym["path"] == scope["path"])  # Gym's own two signs of "no match"
    # the bridge answers Gym's 404 itself exactly where Gym hands a /ng-rollout/ path on unrouted
    assert refused == (passed_through and scope["path"].startswith("/ng-rollout/"))


@pytest.mark.parametrize("case", list(TARGETS))
def test_under_a_mount_path_the_routing_is_the_same(case: str, gym_routes: dict[str, dict[str, Any]]) -> None:
    """Behind a proxy that keeps the bridge's mount path, the path after it is routed as Gym would."""
    target, gym = TARGETS[case], gym_routes[case]
    path, rollout, _ = bridge_route(uvicorn_scope("/envs/counter" + target), "/envs/counter")
    assert (path, rollout) == (gym["path"], gym["rollout_id"])


def test_a_matched_prefix_is_relayed_percent_encoded_and_whole(gym_routes: dict[str, dict[str, Any]]) -> None:
    """``raw_path`` (what a relay to the owner replica writes in its request line) keeps the prefix,
    percent-encoded: printable ASCII only, decoding to the very path Gym matched."""
    matched = [case for case in TARGETS if gym_routes[case]["rollout_id"] is not None]
    assert len(matched) > 20
    for case in matched:
        scope = uvicorn_scope(TARGETS[case])
        routed, _ = prefixes.strip(scope)
        raw: bytes = routed["raw_path"]
        assert all(0x21 <= byte < 0x7F for byte in raw), (case, raw[:200])
        assert unquote(raw.decode("ascii")) == scope["path"], case


def test_the_corpus_covers_what_gym_does(gym_routes: dict[str, dict[str, Any]]) -> None:
    """The premises of the table, read off Gym's own run (not the bridge's): no length cap, a final
    line break dropped, a line break elsewhere unmatched, ``/mcp`` under the prefix routed."""
    assert gym_routes["id of 100000"] == {
        "path": "/seed_session",
        "raw_path": "/seed_session",
        "rollout_id": LONG[100_000],
    }
    assert gym_routes["trailing line break"]["path"] == "/seed_session"
    assert gym_routes["trailing line break"]["rollout_id"] == "abc"
    assert gym_routes["two trailing line breaks"]["rollout_id"] is None
    assert gym_routes["line break mid-path"]["rollout_id"] is None
    assert gym_routes["trailing CR"]["path"] == "/seed_session\r"
    assert gym_routes["mcp under the prefix"]["path"] == "/mcp"
    assert gym_routes["no route after the id"]["rollout_id"] is None
    assert gym_routes["empty id"]["rollout_id"] is None
    assert gym_routes["leading dash"]["rollout_id"] is None


# --------------------------------------------------------------------------------------------
# Over real HTTP: a Gym 0.7.0 server, and the bridge in front of it
# --------------------------------------------------------------------------------------------

gym07_server = test_gym07.gym07_server  # the Gym 0.7.0 rollout-echo server, started for this module


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rollout-prefix-audit") / "audit.jsonl"


@pytest.fixture(scope="module")
def prefix_bridge(gym07_server: str, audit_log: Path, log_dir: Path) -> Iterator[BridgeProcess]:
    """The bridge in front of that server (external mode: it probes that the server strips the
    prefix, and sends it the session's requests under it)."""
    bridge = BridgeProcess(args=["--upstream-url", gym07_server, "--audit-log", str(audit_log)])
    bridge.start(log_dir)
    yield bridge
    bridge.stop()


ROUTED_AS_BY_GYM = {
    "id of 129 characters": ("r" * 129, ""),
    "id of 65000 characters": ("r" * 64_999 + "9", ""),  # near uvicorn's 65535-byte request-target cap
    "final line break, percent-encoded": ("nl-1", "%0A"),
}


@pytest.mark.parametrize("case", sorted(ROUTED_AS_BY_GYM))
def test_any_id_gyms_middleware_takes_reaches_the_route_it_names(
    case: str, prefix_bridge: BridgeProcess, gym07_server: str, audit_log: Path
) -> None:
    """Seed, REST tool, MCP tool and verify under an id of any length, or a path ending in ``%0A``
    (a final line break Gym's pattern drops), reach the route the Gym 0.7.0 server routes them to;
    the upstream sees the id whole; the audit log holds it bounded, the provenance whole."""
    rollout_id, tail = ROUTED_AS_BY_GYM[case]
    prefix = f"/ng-rollout/{rollout_id}"
    seed = (f"{prefix}/seed_session{tail}", b'{"initial_count": 4}')
    direct, bridged = raw_post(gym07_server, *seed), raw_post(prefix_bridge.url, *seed)
    assert direct[0] == bridged[0] == 200, (direct, bridged[0], str(bridged[1])[:300])
    assert without(bridged[1], "mcp") == direct[1]
    token = bridged[1]["mcp"]["headers"][HEADER]
    echo = f"{prefix}/current_rollout_id{tail}"
    assert raw_post(gym07_server, echo) == (200, {"rollout_id": rollout_id})
    assert raw_post(prefix_bridge.url, echo, b"{}", {HEADER: token}) == (200, {"rollout_id": rollout_id})
    for name, arguments in (("increment_counter", {"count": 1}), ("current_rollout_id", {})):
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
        call["params"] = {"name": name, "arguments": arguments}
        rpc = httpx.post(
            f"{prefix_bridge.url}/mcp", json=call, headers={**MCP_HEADERS, HEADER: token}, timeout=30
        ).json()
        assert rpc["result"]["isError"] is False, str(rpc)[:300]
    assert rpc["result"]["structuredContent"] == {"rollout_id": rollout_id}  # the session's, whole
    row = {**counter_row(4, 5), "response": response_with({**CALL, "arguments": '{"count": 1}'})}
    status, answer = raw_post(
        prefix_bridge.url, f"{prefix}/verify{tail}", json.dumps(row).encode(), {HEADER: token}
    )
    assert status == 200 and answer["reward"] == 1.0, str(answer)[:300]
    proof = answer["_bridge"]["provenance"]
    assert proof["rollout_id"] == rollout_id and "verify_rollout_id" not in proof
    assert proof["calls"]["call_inc"]["served"] is True
    # docs/observability.md: whole up to 128 characters, else <first 64>...[<n> chars, sha256:<16 hex>]
    digest = hashlib.sha256(rollout_id.encode()).hexdigest()[:16]
    shown = (
        rollout_id
        if len(rollout_id) <= 128
        else f"{rollout_id[:64]}...[{len(rollout_id)} chars, sha256:{digest}]"
    )
    lines = [json.loads(line) for line in audit_log.read_text().splitlines()]
    assert sum(line.get("rollout_id") == shown for line in lines) >= 3
    assert max(len(json.dumps(line)) for line in lines) < 1000


@pytest.mark.parametrize(
    "target", [b"/ng-rollout/nl-2/seed_session\n", b"/ng-rollout/" + b"r" * 100_000 + b"/seed_session"]
)
def test_what_uvicorns_http_parser_refuses_never_reaches_a_route(
    target: bytes, prefix_bridge: BridgeProcess, gym07_server: str
) -> None:
    """uvicorn's httptools answers 400, on the Gym server and the bridge alike, for a raw line break
    in a request target and for a target over 65535 bytes: a final line break reaches Gym's pattern
    only as ``%0A``, and an id that arrives over HTTP is under 64 KiB."""
    answers = []
    for url in (gym07_server, prefix_bridge.url):
        parsed = httpx.URL(url)
        with socket.create_connection((parsed.host, parsed.port), timeout=30) as connection:
            connection.sendall(
                b"POST " + target + b" HTTP/1.1\r\nhost: x\r\ncontent-type: "
                b"application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
            )
            answers.append(connection.recv(65536).split(b"\r\n", 1)[0])
    assert answers[0] == answers[1], answers
    assert answers[0].startswith(b"HTTP/1.1 400"), answers
