"""What uvicorn's ASGI request cycle costs per request, against a bare httptools protocol.

The question it answers: how much could the bridge save by answering a request below
the ASGI cycle -- in uvicorn's protocol itself, before a scope, a task and the receive/send
machinery exist? Three servers answer the same fixed ``tools/call`` result to the same request,
each in its own process on uvloop:

* ``bare``: an ``asyncio.Protocol`` that feeds ``httptools`` and writes a prebuilt answer when the
  message completes (no scope, no task): the floor of any Python HTTP server here;
* ``uvicorn``: uvicorn's httptools protocol with a three-line ASGI app (read the body, send start
  and body);
* ``bridge-wire``: the same app under ``bridge.http.wire.HttpProtocol`` (uvicorn's protocol, each
  answer in one write), as ``gym-mcp-bridge serve`` runs it.

Client: ``http.client`` keep-alive, one call at a time (a harness loop), rounds interleaved. Prints
calls/s, p50/p99 and each server's CPU per request (``/proc/<pid>/task/*/schedstat``). What
``uvicorn`` costs beyond ``bare`` is the most a below-ASGI path could save per request.

    python -m benchmarks.asgi_floor [--calls 4000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import statistics
import subprocess
import sys
import time
from typing import Any

from benchmarks.procs import cpu_seconds, free_port

KINDS = ("bare", "uvicorn", "bridge-wire")
ANSWER = (
    b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"{\\"success\\":true}"}],'
    b'"structuredContent":{"success":true},"isError":false}}'
)
REQUEST = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"increment_counter",'
    b'"arguments":{"count":1}}}'
)
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER, "more_body": False})


def serve(kind: str, port: int) -> None:
    import uvloop

    if kind == "bare":
        import httptools

        answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
            len(ANSWER),
            ANSWER,
        )

        class Bare(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport: Any = transport
                self.parser = httptools.HttpRequestParser(self)

            def data_received(self, data: bytes) -> None:
                self.parser.feed_data(data)

            def on_message_complete(self) -> None:
                self.transport.write(answer)

        async def main() -> None:
            server = await asyncio.get_running_loop().create_server(Bare, "127.0.0.1", port)
            await server.serve_forever()

        uvloop.run(main())
        return
    import uvicorn

    from bridge.http.wire import HttpProtocol

    protocol: Any = HttpProtocol if kind == "bridge-wire" else "httptools"
    config = uvicorn.Config(
        _app, host="127.0.0.1", port=port, loop="uvloop", http=protocol, log_level="warning",
        access_log=False, lifespan="off", proxy_headers=False,
    )  # fmt: skip
    uvicorn.Server(config).run()


def _ready(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            _call(conn)
            conn.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _call(conn: http.client.HTTPConnection) -> None:
    conn.request("POST", "/mcp", REQUEST, HEADERS)
    response = conn.getresponse()
    body = response.read()
    if response.status != 200 or body != ANSWER:
        raise RuntimeError(f"asgi_floor: answered {response.status} {body[:200]!r}")


def measure(port: int, pid: int, calls: int) -> dict[str, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    for _ in range(200):  # warm-up
        _call(conn)
    latencies: list[float] = []
    clock = time.perf_counter
    cpu0, started = cpu_seconds(pid), clock()
    for _ in range(calls):
        t0 = clock()
        _call(conn)
        latencies.append(clock() - t0)
    wall, cpu1 = clock() - started, cpu_seconds(pid)
    conn.close()
    latencies.sort()
    return {
        "calls_per_s": calls / wall,
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1e3,
        "cpu_ms": (cpu1 - cpu0) / calls * 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.asgi_floor", description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--serve", nargs=2, metavar=("KIND", "PORT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return 0
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for kind in KINDS:
            port = free_port()
            argv_ = [sys.executable, "-m", "benchmarks.asgi_floor", "--serve", kind, str(port)]
            servers[kind] = (subprocess.Popen(argv_), port)
        for _, port in servers.values():
            _ready(port)
        results: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
        for r in range(args.rounds):
            for kind in KINDS[r % len(KINDS) :] + KINDS[: r % len(KINDS)]:
                proc, port = servers[kind]
                results[kind].append(measure(port, proc.pid, args.calls))
    finally:
        for proc, _ in servers.values():
            proc.kill()
            proc.wait()
    print(f"sequential http.client keep-alive, {args.calls} calls x {args.rounds} rounds, medians")
    print(f"{'server':<12} {'calls/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'server CPU ms/req':>18}")
    for kind in KINDS:
        med = {key: statistics.median(x[key] for x in results[kind]) for key in results[kind][0]}
        print(
            f"{kind:<12} {med['calls_per_s']:8.0f} {med['p50_ms']:7.3f} {med['p99_ms']:7.3f} {med['cpu_ms']:18.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
