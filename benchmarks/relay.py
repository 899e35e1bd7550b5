"""Four relays in front of the upstream, controls for the hops and capacity benchmarks: what a hop
costs before the bridge does any work of its own.

``python -m benchmarks.relay --target 127.0.0.1:PORT [--mode bytes|splice|forward|asgi]`` listens on a free
loopback port (printed as ``port N`` on its first line).

* ``bytes`` (hops path ``relay``): for each connection it accepts, one to the target, bytes copied
  both ways unchanged -- no HTTP parsing, no session, no JSON. On uvloop as the bridge is
  (TCP_NODELAY on both sockets, a write as soon as bytes arrive): what a second process on the path
  costs by itself, two more loopback sockets and two more wake-ups per call.
* ``splice`` (capacity path ``splice``): HTTP parsed, but below any ASGI cycle -- each request
  parsed by httptools on its connection's protocol, written to the target by the bridge's
  ``Forwarding.request_bytes`` over its keep-alive pool (``KeepAlivePool``), the answer written back
  as one status line, headers and body. It is the least a forwarder that reads the session header
  and relays the request below the ASGI cycle would cost in Python (it does not verify a token, which
  a forwarder must).
* ``forward`` (capacity path ``fwd-splice``): ``splice`` in front of a bridge replica, doing what a
  non-owner does before it relays a ``POST /mcp`` to the session's owner, with the bridge's own
  functions: the header size, the rollout prefix, Host/Origin against the default allow-lists, the
  body's size and JSON depth, the session token verified with the deployment's key (``TokenSigner``,
  its cache) and found to be another replica's, that replica looked up in the peers, the loop
  marker, the relay counted. It is the least a non-owner that forwards below the ASGI cycle costs
  in Python; a request that fails a check closes the connection (a floor, not a server).
* ``asgi`` (hops path ``asgi``): the bridge's own HTTP stack with none of its MCP work -- uvicorn
  with ``bridge.http.wire.HttpProtocol`` on uvloop, the body read by ``read_body`` and the request
  relayed to the target by the bridge's ``Forwarding.relay`` (its keep-alive pool, one write, the
  answer as one start and one body message). It is what every request through the bridge pays for
  HTTP parsing, the ASGI cycle and the upstream exchange; what ``owner`` costs beyond it is the
  bridge's MCP work (guard, token, session, tool call, result).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import http
import os
import sys
from typing import TYPE_CHECKING, Any

import httptools
import uvloop

if TYPE_CHECKING:  # imported where a relay of that kind starts: the byte relay loads no bridge code
    from bridge.http.forwarding import Forwarding
    from bridge.upstream.transport import KeepAlivePool


class _Pipe(asyncio.Protocol):
    """One side of a relayed connection: what it receives goes to its peer's transport."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.pending: list[bytes] = []  # what arrived before the peer was connected
        self.connecting: asyncio.Task[None] | None = None  # a client side: connecting to the target

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def _serve(target_host: str, target_port: int) -> None:
    loop = asyncio.get_running_loop()

    def accepted() -> _Pipe:
        client = _Pipe()

        async def connect() -> None:
            try:
                _, upstream = await loop.create_connection(_Pipe, target_host, target_port)
            except OSError:
                if client.transport is not None:
                    client.transport.close()
                return
            upstream.peer, client.peer = client, upstream
            for data in client.pending:
                upstream.transport.write(data)  # type: ignore[union-attr]
            client.pending.clear()

        client.connecting = loop.create_task(connect())
        return client

    server = await loop.create_server(accepted, "127.0.0.1", 0)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


class _Splice(asyncio.Protocol):
    """One client connection of the ``splice`` relay: requests in the order they arrived (pipelined
    ones wait their turn), each relayed whole and answered in one write."""

    def __init__(self, forwarding: Forwarding, pool: KeepAlivePool, not_relayed: frozenset[bytes]) -> None:
        self.forwarding, self.pool, self.not_relayed = forwarding, pool, not_relayed
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: collections.deque[bytes] = collections.deque()
        self.running = False
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    def on_message_begin(self) -> None:
        self.url, self.headers, self.body = b"", [], []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        path, _, query = self.url.partition(b"?")
        method = self.parser.get_method().decode()
        scope = {"method": method, "raw_path": path, "query_string": query, "headers": self.headers}
        body = b"".join(self.body)
        if not self.admit(scope, body):
            if self.transport is not None:
                self.transport.close()
            return
        self.queue.append(self.forwarding.request_bytes(scope, body, self.pool))
        if not self.running:
            self.running = True
            asyncio.get_running_loop().create_task(self._drain())

    def admit(self, scope: dict[str, Any], body: bytes) -> bool:
        """Whether the request is relayed (``splice``: every request)."""
        return True

    async def _drain(self) -> None:
        try:
            while self.queue and self.transport is not None and not self.transport.is_closing():
                status, headers, answer = await self.pool.send(self.queue.popleft(), 60.0)
                head = [b"HTTP/1.1 %d %s" % (status, http.HTTPStatus(status).phrase.encode())]
                head += [key + b": " + value for key, value in headers if key not in self.not_relayed]
                head += [b"content-length: %d" % len(answer), b"", answer]
                self.transport.write(b"\r\n".join(head))
        except (OSError, TimeoutError, ValueError) as exc:  # the client is told by the closed connection
            print(f"relay: {type(exc).__name__}: {exc}; closing the client's connection", file=sys.stderr)
            if self.transport is not None:
                self.transport.close()
        finally:
            self.running = False


class _Forward(_Splice):
    """A ``forward`` relay's connection: ``_Splice`` that admits a request only past the checks a
    non-owner replica makes before it relays (``Guard``, then ``McpEndpoint._owner``)."""

    def __init__(self, checks: _Checks, forwarding: Forwarding, pool: KeepAlivePool) -> None:
        super().__init__(forwarding, pool, checks.not_relayed)
        self.checks = checks

    def admit(self, scope: dict[str, Any], body: bytes) -> bool:
        return self.checks.admit(scope, body)


class _Checks:
    """What ``Guard`` and ``McpEndpoint.post`` check before a ``POST /mcp`` is relayed, as calls to
    the same functions, against a deployment's default settings."""

    def __init__(self, owner: str, audience: str) -> None:
        from prometheus_client import CollectorRegistry, Counter

        from bridge.http import forwarding, prefixes
        from bridge.http.guard import AllowList, rebinding_protection, rebinding_refusal
        from bridge.http.requests import json_too_deep
        from bridge.peers import Peers, default_peers
        from bridge.settings import Settings
        from bridge.tokens import ForeignIssuer, TokenSigner, from_raw_headers

        secret = os.environ["GYM_MCP_BRIDGE_SECRET"]
        # the defaults, the secret from the environment
        self.settings = settings = Settings.model_validate({})
        own = "http://127.0.0.1:1"  # this relay's advertise URL: a loopback replica, as the peer is
        security = rebinding_protection(settings, "127.0.0.1", own)
        self.hosts = AllowList(security.allowed_hosts or [])
        self.origins = AllowList(security.allowed_origins or [])
        self.signer = TokenSigner([secret], issuer=own, audience=audience)
        self.peers = Peers(default_peers(own))
        self.owner = owner
        self.not_relayed = forwarding.NOT_RELAYED
        self.marker = forwarding.MARKER.encode("latin-1")
        self.relayed = Counter("relayed", "", ["outcome"], registry=CollectorRegistry()).labels("relayed")
        self.strip, self.refusal, self.too_deep = prefixes.strip, rebinding_refusal, json_too_deep
        self.token_of, self.foreign = from_raw_headers, ForeignIssuer

    def admit(self, scope: dict[str, Any], body: bytes) -> bool:
        settings, headers = self.settings, scope["headers"]
        if sum(len(k) + len(v) + 4 for k, v in headers) > settings.max_header_bytes:
            return False
        scope["path"] = scope["raw_path"].decode("latin-1")
        routed, bad_prefix = self.strip(scope)
        found = dict(headers)
        if bad_prefix is not None or self.refusal(found, self.hosts, self.origins) is not None:
            return False
        if routed["path"] != "/mcp" or scope["method"] != "POST" or len(body) > settings.max_body_bytes:
            return False
        if self.too_deep(body, settings.max_json_depth) or len(body) > settings.max_argument_bytes:
            return False
        token = self.token_of(found)
        if token is None or self.marker in found:
            return False
        try:
            self.signer.verify(token)
        except self.foreign as exc:
            if exc.claims.issuer != self.owner or not self.peers.allows(exc.claims.issuer):
                return False
            self.relayed.inc()
            return True
        return False


async def _serve_splice(target_host: str, target_port: int) -> None:
    from prometheus_client import CollectorRegistry

    from bridge.http.forwarding import NOT_RELAYED, Forwarding
    from bridge.upstream.transport import KeepAlivePool

    loop = asyncio.get_running_loop()
    forwarding = Forwarding("http://splice-relay", 60.0, 60.0, CollectorRegistry())
    pool = KeepAlivePool(f"http://{target_host}:{target_port}", 1024, 30.0, 5.0)
    server = await loop.create_server(lambda: _Splice(forwarding, pool, NOT_RELAYED), "127.0.0.1", 0)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


async def _serve_forward(target_host: str, target_port: int) -> None:
    import json
    import urllib.request

    from prometheus_client import CollectorRegistry

    from bridge.http.forwarding import Forwarding
    from bridge.upstream.transport import KeepAlivePool

    owner = f"http://{target_host}:{target_port}"
    with urllib.request.urlopen(f"{owner}/healthz", timeout=10) as answer:  # the tokens' audience
        audience = json.load(answer)["upstream"]["server_name"]
    checks = _Checks(owner, audience)
    loop = asyncio.get_running_loop()
    forwarding = Forwarding(checks.signer.issuer, 60.0, 60.0, CollectorRegistry())
    pool = KeepAlivePool(owner, 1024, 30.0, 5.0)
    server = await loop.create_server(lambda: _Forward(checks, forwarding, pool), "127.0.0.1", 0)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


async def _serve_asgi(target_host: str, target_port: int) -> None:
    import socket

    import uvicorn
    from prometheus_client import CollectorRegistry
    from starlette.types import Receive, Scope, Send

    from bridge.http.forwarding import Forwarding
    from bridge.http.requests import read_body
    from bridge.http.wire import HttpProtocol

    target = f"http://{target_host}:{target_port}"
    forwarding = Forwarding("http://asgi-relay", 60.0, 60.0, CollectorRegistry())

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive, dict(scope["headers"]).get(b"content-length"), 1 << 24)
        if body.data is not None:
            await forwarding.relay(scope, body.data, target, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # before the port is told: a client may connect before uvicorn's server starts
    print(f"port {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, http=HttpProtocol, proxy_headers=False, lifespan="off"
    )  # as ``gym-mcp-bridge serve`` configures it (bridge/commands/cli.py)
    await uvicorn.Server(config).serve(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.relay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="host:port to relay to")
    parser.add_argument("--mode", choices=("bytes", "splice", "forward", "asgi"), default="bytes")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    modes = {"bytes": _serve, "splice": _serve_splice, "forward": _serve_forward, "asgi": _serve_asgi}
    serve = modes[args.mode]
    uvloop.run(serve(host, int(port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
