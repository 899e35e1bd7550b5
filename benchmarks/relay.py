"""A byte relay: the floor of any hop in its own process, as a control for the hops benchmark.

``python -m benchmarks.relay --target 127.0.0.1:PORT`` listens on a free loopback port (printed as
``port N`` on its first line) and, for each connection it accepts, opens one to the target and
copies bytes both ways unchanged -- no HTTP parsing, no session, no JSON. Run on uvloop as the
bridge is (TCP_NODELAY on both sockets, a write as soon as bytes arrive). Direct HTTP through it
(the hops path ``relay``) costs what a second process on the path costs by itself: two more
loopback sockets and two more wake-ups per call; what the bridge adds beyond that is its own work.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.relay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="host:port to relay to")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    uvloop.run(_serve(host, int(port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
