"""Two relays in front of the upstream, controls for the hops benchmark: what a hop costs before the
bridge does any work of its own.

``python -m benchmarks.relay --target 127.0.0.1:PORT [--mode bytes|asgi]`` listens on a free
loopback port (printed as ``port N`` on its first line).

* ``bytes`` (hops path ``relay``): for each connection it accepts, one to the target, bytes copied
  both ways unchanged -- no HTTP parsing, no session, no JSON. On uvloop as the bridge is
  (TCP_NODELAY on both sockets, a write as soon as bytes arrive): what a second process on the path
  costs by itself, two more loopback sockets and two more wake-ups per call.
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
import sys

import uvloop


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
    print(f"port {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, http=HttpProtocol, proxy_headers=False, lifespan="off"
    )  # as ``gym-mcp-bridge serve`` configures it (bridge/commands/cli.py)
    await uvicorn.Server(config).serve(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.relay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="host:port to relay to")
    parser.add_argument("--mode", choices=("bytes", "asgi"), default="bytes")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    uvloop.run((_serve if args.mode == "bytes" else _serve_asgi)(host, int(port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
