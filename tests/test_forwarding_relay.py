"""The forwarding relay's own rules: the raw keep-alive pool per owner replica.

Two real replicas, each a bridge in external mode in front of its own real Gym counter server: B
owns the sessions, A relays them. What only a misbehaving owner can show -- extra bytes after its
answer, a late answer, dying mid-body, never answering, a chunked answer with hop-by-hop headers --
comes from ``FakeOwner``, a stand-in for an owner replica (a real bridge cannot be made to
misbehave on cue): a loopback server inside A's default peers, named as the owner by a token signed
with the deployment's shared key (as a replica's own token would be). It records every request it
reads and the connection it came on, and answers each with the request's own session token, so an
answer that reached the wrong caller is seen.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httptools
import httpx
import orjson
import pytest

from bridge.http.forwarding import MARKER
from tests.fixtures.bridges import HEADER, BridgeProcess, counter_row, free_port
from tests.fixtures.helpers import (
    FAULT_SPEC,
    MCP_HEADERS,
    claims_of,
    fault_env,
    forge,
    metric,
    rpc_call,
    seed,
    upstream_counts,
)
from tests.test_forwarding import ConnectionCounter, start_upstreams

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")]

TOOL_TIMEOUT_S = 2.0  # A's relay budget is this plus forwarding's 10 s margin
BUDGET_S = TOOL_TIMEOUT_S + 10.0


@dataclass
class Pair:
    a: BridgeProcess  # relays
    b: BridgeProcess  # owns the sessions
    upstream_b: str
    procs: list[Any] = field(default_factory=list)


@pytest.fixture(scope="module")
def pair(log_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    workdir = tmp_path_factory.mktemp("relay-pods")
    upstreams = start_upstreams(FAULT_SPEC, 2, workdir, fault_env())
    bridges = []
    for _, url in upstreams:
        port = free_port()
        args = ["--upstream-url", url, "--server-name", "example_session_state_mgmt"]
        args += ["--advertise-url", f"http://127.0.0.1:{port}"]
        env = {"GYM_MCP_BRIDGE_TOOL_TIMEOUT_S": str(TOOL_TIMEOUT_S)}
        bridges.append(BridgeProcess(args=args, env=env, port=port).start(log_dir, wait_ready=False))
    for bridge in bridges:
        bridge.wait_ready(120)
    yield Pair(bridges[0], bridges[1], upstreams[1][1], [p for p, _ in upstreams])
    for bridge in bridges:
        bridge.stop()
    for proc in (p for p, _ in upstreams):
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# -- the stand-in owner ----------------------------------------------------------------------------------


@dataclass
class Seen:
    conn: int
    method: bytes
    url: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes


class _Request:
    """httptools callbacks collecting one request."""

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.done = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


class FakeOwner:
    """A loopback HTTP/1.1 server standing in for an owner replica; ``mode`` sets its next answers."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.seen: list[Seen] = []
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> FakeOwner:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    def token(self, real: str) -> str:
        """A token of the shared key naming this server as the session's owner."""
        return forge({**claims_of(real), "iss": self.url})

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        try:
            while True:
                collected = _Request()
                parser = httptools.HttpRequestParser(collected)
                while not collected.done:
                    data = await reader.read(65536)
                    if not data:
                        return
                    parser.feed_data(data)
                seen = Seen(
                    conn, parser.get_method(), collected.url, collected.headers, b"".join(collected.body)
                )
                self.seen.append(seen)
                if not await self._answer(seen, writer):
                    return
        except (ConnectionError, httptools.HttpParserError):
            return
        finally:
            writer.close()

    async def _answer(self, seen: Seen, writer: asyncio.StreamWriter) -> bool:
        token = dict(seen.headers).get(HEADER.lower().encode(), b"").decode()
        body = orjson.dumps({"conn": seen.conn, "token": token})
        ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
            len(body),
            body,
        )
        mode = self.mode
        if mode == "ok":
            writer.write(ok)
        elif mode == "extra":  # a second, forged answer right behind the real one, in the same write
            forged = orjson.dumps({"conn": seen.conn, "token": "another-session"})
            writer.write(ok + b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(forged), forged))
        elif mode == "late":  # the answer, then bytes nobody asked for while the connection is idle
            writer.write(ok)
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
        elif mode == "die":  # promises 1000 bytes, sends 10, goes away
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n")
            writer.write(body[:10])
            await writer.drain()
            return False
        elif mode == "garbage":
            writer.write(b"HTTP/1.1 2OO OK\r\n\r\n")
            await writer.drain()
            return False
        elif mode == "silent":
            await asyncio.sleep(BUDGET_S + 5)
            return False
        elif mode == "huge":  # 6 MB chunked, hop-by-hop headers, two cookies, its own date and server
            payload = b"x" * (6 * 1024 * 1024)
            writer.write(
                b"HTTP/1.1 201 Created\r\ncontent-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n"
                b"connection: keep-alive\r\nkeep-alive: timeout=99\r\ndate: Thu, 01 Jan 1970 00:00:00 GMT\r\n"
                b"server: fake-owner/1.0\r\nset-cookie: a=1; Path=/\r\nset-cookie: b=2; Path=/\r\n"
                b"x-owner-header: kept\r\n\r\n"
            )
            for start in range(0, len(payload), 1 << 20):
                chunk = payload[start : start + (1 << 20)]
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


@pytest.fixture
async def owner() -> AsyncIterator[FakeOwner]:
    async with FakeOwner() as fake:
        yield fake


async def relay(
    a: BridgeProcess, token: str, request_id: int, path: str = "/mcp", **headers: str
) -> httpx.Response:
    payload = rpc_call("increment_counter", {"count": 1}, request_id) if path == "/mcp" else {"count": 1}
    async with httpx.AsyncClient(timeout=BUDGET_S + 20) as http:
        return await http.post(
            f"{a.url}{path}", json=payload, headers={**MCP_HEADERS, HEADER: token, **headers}
        )


# -- connection reuse ------------------------------------------------------------------------------------


async def test_a_connection_is_reused_only_after_an_exchange_that_ended_exactly(
    pair: Pair, owner: FakeOwner
) -> None:
    token = owner.token(seed(pair.b))
    for i in range(4):  # well-behaved: one connection carries them all
        answer = await relay(pair.a, token, i)
        assert answer.status_code == 200 and answer.json() == {"conn": 1, "token": token}, answer.text
    assert owner.connections == 1 and len(owner.seen) == 4

    other = owner.token(seed(pair.b, counter_row(7)))  # another session, relayed over the same pool
    owner.mode = "extra"
    answer = await relay(pair.a, token, 10)
    assert answer.json() == {"conn": 1, "token": token}, "the first answer is the caller's own"
    owner.mode = "ok"
    answer = await relay(pair.a, other, 11)
    assert answer.json() == {"conn": 2, "token": other}, "the forged second answer reached nobody"

    owner.mode = "late"
    answer = await relay(pair.a, token, 12)
    assert answer.json() == {"conn": 2, "token": token}
    await asyncio.sleep(0.5)  # the late bytes arrive while the connection is idle in the pool
    owner.mode = "ok"
    answer = await relay(pair.a, other, 13)
    assert answer.json() == {"conn": 3, "token": other}, (
        "a connection that received unasked bytes is not reused"
    )


# -- failures are legible ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["die", "garbage"])
async def test_an_owner_that_breaks_off_or_garbles_its_answer_is_a_502_naming_it(
    pair: Pair, owner: FakeOwner, mode: str
) -> None:
    token = owner.token(seed(pair.b))
    owner.mode = mode
    before = metric(pair.a, "gym_mcp_bridge_forwarded_total", outcome="unreachable")
    answer = await relay(pair.a, token, 21)
    assert answer.status_code == 502, answer.text
    message = answer.json()["error"]["message"]
    assert (
        message.startswith(f"owner replica {owner.url} of this session is unreachable: ")
        and answer.json()["id"] == 21
    )
    assert "\n" not in message
    rest = await relay(pair.a, token, 22, path="/increment_counter")
    assert rest.status_code == 502 and f"owner replica {owner.url}" in rest.json()["detail"], rest.text
    assert metric(pair.a, "gym_mcp_bridge_forwarded_total", outcome="unreachable") == before + 2
    owner.mode = "ok"  # the broken connections were dropped: the next call gets a fresh one and its answer
    answer = await relay(pair.a, token, 23)
    assert answer.status_code == 200 and answer.json()["token"] == token
    assert len(owner.seen) == 3, "one request each: a broken exchange is never retried"


async def test_an_owner_that_does_not_answer_is_a_504_naming_it_within_the_budget(
    pair: Pair, owner: FakeOwner
) -> None:
    token = owner.token(seed(pair.b))
    owner.mode = "silent"
    started = time.monotonic()
    answer = await relay(pair.a, token, 31)
    took = time.monotonic() - started
    assert answer.status_code == 504, answer.text
    assert answer.json()["error"]["message"] == (
        f"owner replica {owner.url} did not answer within {BUDGET_S:g}s (tool_timeout_s + 10s) "
        "(session forwarded there)"
    )
    assert BUDGET_S - 0.5 < took < BUDGET_S + 5, took
    owner.mode = "ok"
    assert (await relay(pair.a, token, 32)).json()["token"] == token


async def test_an_owner_that_refuses_connections_is_a_502_naming_it(pair: Pair) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    token = forge({**claims_of(seed(pair.b)), "iss": closed})
    answer = await relay(pair.a, token, 41)
    assert answer.status_code == 502
    assert (
        f"owner replica {closed} of this session is unreachable: ConnectionRefusedError"
        in (answer.json()["error"]["message"])
    )


# -- what is relayed -----------------------------------------------------------------------------------------


async def test_the_request_goes_unchanged_but_for_the_hop_and_the_answer_comes_back_whole(
    pair: Pair, owner: FakeOwner
) -> None:
    token = owner.token(seed(pair.b))
    owner.mode = "huge"
    body = orjson.dumps(rpc_call("increment_counter", {"count": 1, "pad": "é" * 1000}, 51))
    sent = {
        **MCP_HEADERS,
        HEADER: token,
        "x-caller-header": "kept as sent",
        "cookie": "gym_mcp_bridge_session=abc; other=1",
        "connection": "keep-alive",
        "keep-alive": "timeout=5",
        "te": "trailers",
        "proxy-authorization": "Basic c2VjcmV0",
    }
    async with httpx.AsyncClient(timeout=60) as http:
        answer = await http.post(f"{pair.a.url}/mcp?x=1&y=%20", content=body, headers=sent)
    (seen,) = owner.seen
    got = dict(seen.headers)
    assert seen.method == b"POST" and seen.url == b"/mcp?x=1&y=%20"
    assert seen.body == body, "the body is relayed byte for byte"
    assert got[MARKER.encode()] == pair.a.url.encode(), "the marker names the relaying replica"
    assert got[b"host"] == owner.url.removeprefix("http://").encode(), "host is the owner's"
    for name in ("x-caller-header", "cookie", HEADER, "content-type", "accept"):
        assert got[name.lower().encode()] == sent[name].encode(), name
    assert got[b"content-length"] == str(len(body)).encode()
    for hop in (b"keep-alive", b"te", b"proxy-authorization", b"connection", b"transfer-encoding"):
        assert hop not in got, hop
    assert len([k for k, _ in seen.headers if k == b"content-length"]) == 1

    assert answer.status_code == 201
    assert answer.content == b"x" * (6 * 1024 * 1024), "the whole de-chunked answer"
    assert answer.headers["content-length"] == str(6 * 1024 * 1024)
    assert answer.headers.get_list("set-cookie") == ["a=1; Path=/", "b=2; Path=/"]
    assert answer.headers["x-owner-header"] == "kept"
    assert "transfer-encoding" not in answer.headers and "keep-alive" not in answer.headers
    assert answer.headers["server"] != "fake-owner/1.0" and "1970" not in answer.headers["date"]


async def test_a_huge_request_is_answered_through_a_replica_exactly_as_by_its_owner(pair: Pair) -> None:
    """Real owner, real Gym server: a 3 MB body (under the 4 MB limit) and one over the limit."""
    token = seed(pair.b, counter_row(3))
    big = rpc_call("increment_counter", {"count": 1, "pad": "x" * (3 * 1024 * 1024)}, 61)
    headers = {**MCP_HEADERS, HEADER: token}
    async with httpx.AsyncClient(timeout=60) as http:
        direct = await http.post(f"{pair.b.url}/mcp", json=big, headers=headers)
        via = await http.post(f"{pair.a.url}/mcp", json=big, headers=headers)
        assert (via.status_code, via.content) == (direct.status_code, direct.content)
        assert via.headers["content-type"] == direct.headers["content-type"]
        relayed = metric(pair.a, "gym_mcp_bridge_forwarded_total", outcome="relayed")
        over = rpc_call("increment_counter", {"count": 1, "pad": "x" * (5 * 1024 * 1024)}, 62)
        refused = await http.post(f"{pair.a.url}/mcp", json=over, headers=headers)
        assert refused.status_code == 413 and "request body too large" in refused.json()["error"]["message"]
        assert metric(pair.a, "gym_mcp_bridge_forwarded_total", outcome="relayed") == relayed, (
            "A refused it itself"
        )
        count = await http.post(f"{pair.a.url}/get_counter_value", json={}, headers={HEADER: token})
    acted = direct.status_code == 200 and direct.json()["result"]["isError"] is False
    assert count.json() == {"count": 5 if acted else 3}, "both calls did the same, once each"


# -- a stranger's token --------------------------------------------------------------------------------------


async def test_an_owner_claim_outside_the_peers_or_not_a_plain_url_is_never_contacted(pair: Pair) -> None:
    """Even signed with the shared key (as only a replica could), an ``iss`` that is not a plain base
    URL inside the peers is refused, naming it, and no connection is made to the address."""
    listener = ConnectionCounter("127.0.0.1")
    outside = ConnectionCounter("127.0.0.2")
    try:
        port = listener.url.rsplit(":", 1)[1]
        real = seed(pair.b)
        claims = [
            f"{listener.url}/elsewhere",
            f"{listener.url}?x=1",
            f"http://user:pw@127.0.0.1:{port}",
            f"{listener.url}\r\nx-injected: 1",
            f"ftp://127.0.0.1:{port}",
            outside.url,
        ]
        before = metric(pair.a, "gym_mcp_bridge_forwarded_total")
        for iss in claims:
            token = forge({**claims_of(real), "iss": iss})
            answer = await relay(pair.a, token, 71)
            assert answer.status_code == 200 and answer.json()["result"]["isError"], (iss, answer.text)
            text = answer.json()["result"]["content"][0]["text"]
            assert "outside this deployment's peers" in text and "not forwarded" in text, (iss, text)
            rest = await relay(pair.a, token, 72, path="/increment_counter")
            assert rest.status_code == 401 and "outside this deployment's peers" in rest.json()["detail"]
        assert listener.accepted() == 0 and outside.accepted() == 0, (
            "an address outside the peers was contacted"
        )
        assert metric(pair.a, "gym_mcp_bridge_forwarded_total") == before
    finally:
        listener.sock.close()
        outside.sock.close()


async def test_concurrent_forwarded_calls_each_act_on_their_own_session(pair: Pair) -> None:
    """24 sessions on B, 20 calls each, all at once through A's pool: every counter exact, and B's
    upstream saw exactly those calls."""
    tokens = [seed(pair.b, counter_row(1000 * i)) for i in range(24)]
    before = upstream_counts(pair.upstream_b).get("POST /increment_counter", 0)
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as http:

        async def rollout(i: int, token: str) -> None:
            for k in range(20):
                payload = rpc_call("increment_counter", {"count": i + 1}, k)
                answer = await http.post(
                    f"{pair.a.url}/mcp", json=payload, headers={**MCP_HEADERS, HEADER: token}
                )
                assert answer.status_code == 200 and answer.json()["id"] == k, answer.text
                assert answer.json()["result"]["structuredContent"] == {"success": True}

        await asyncio.gather(*(rollout(i, t) for i, t in enumerate(tokens)))
        for i, token in enumerate(tokens):
            count = await http.post(f"{pair.a.url}/get_counter_value", json={}, headers={HEADER: token})
            assert count.json() == {"count": 1000 * i + 20 * (i + 1)}, (i, count.text)
    assert upstream_counts(pair.upstream_b)["POST /increment_counter"] - before == 24 * 20
