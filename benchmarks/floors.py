"""The floors the per-call benchmark sets the bridge against, each in front of the same upstream:
``nginx`` (Debian's, ``scripts/setup-nginx.sh``; one process, a keep-alive reverse proxy: the floor
of any second process on the path) and ``asgi`` (the bridge's own HTTP stack with none of its MCP
work: uvicorn with ``bridge.http.wire.HttpProtocol`` as ``serve`` configures it, the body read by
the bridge's ``read_body``, relayed by its ``Forwarding.relay``: the bridge's code, not a copy).
``python -m benchmarks.floors --target HOST:PORT`` serves the ``asgi`` floor.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import procs
from benchmarks.procs import BenchError, Proc

NGINX = Path("/usr/sbin/nginx")
NGINX_CONF = """daemon off;
master_process off;
error_log {dir}/error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi; uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
    keepalive_requests 1000000;
    client_body_buffer_size 128k;
    proxy_buffer_size 16k;
    proxy_buffers 8 16k;
    upstream bare {{ server {upstream}; keepalive 512; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://bare;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


def start_nginx(
    workdir: Path, upstream_url: str, core: int | None, name: str = "nginx", poll: float = 0.05
) -> Proc:
    """nginx in front of ``upstream_url`` (pinned to ``core`` when given), its config and logs in
    ``workdir/name``; returned once it serves the upstream's ``/openapi.json`` (polled every ``poll`` s)."""
    if not NGINX.exists():
        raise BenchError(f"{NGINX} is missing: run scripts/setup-nginx.sh (Debian's nginx-light)")
    home = workdir / name
    home.mkdir()
    port = procs.free_port()
    conf = home / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=home, upstream=upstream_url.removeprefix("http://"), port=port))
    pin = ["taskset", "-c", str(core)] if core is not None else []
    proc = procs._spawn(
        name, [*pin, str(NGINX), "-p", str(home), "-c", str(conf), "-e", str(home / "error.log")], workdir
    )
    proc.url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while procs.http_status(f"{proc.url}/openapi.json") != 200:
        if not proc.alive() or time.monotonic() > deadline:
            proc.stop()
            raise BenchError(f"nginx did not serve:\n{proc.log_tail()}\n{(home / 'error.log').read_text()}")
        time.sleep(poll)
    return proc


def nginx_version() -> str | None:
    if not NGINX.exists():
        return None
    out = subprocess.run([str(NGINX), "-v"], capture_output=True, text=True, check=False)
    return (out.stderr or out.stdout).strip()


def start_asgi(workdir: Path, target_url: str, pin: list[str] | None = None) -> Proc:
    """The ``asgi`` floor (process ``asgi``) in front of ``target_url``; ``pin``: a ``taskset`` prefix."""
    argv = [
        *(pin or []),
        sys.executable,
        "-m",
        "benchmarks.floors",
        "--target",
        target_url.removeprefix("http://"),
    ]
    proc = procs._spawn("asgi", argv, workdir)
    proc.url = f"http://127.0.0.1:{procs.port_line(proc, 60)}"
    return proc


async def serve_asgi(target: str) -> None:
    import uvicorn
    from prometheus_client import CollectorRegistry
    from starlette.types import Receive, Scope, Send

    from bridge.http.forwarding import Forwarding
    from bridge.http.requests import read_body
    from bridge.http.wire import HttpProtocol

    forwarding = Forwarding("http://asgi-floor", 60.0, 60.0, CollectorRegistry())

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive, dict(scope["headers"]).get(b"content-length"), 1 << 24)
        if body.data is not None:
            await forwarding.relay(scope, body.data, f"http://{target}", send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # before the port is told: a client may connect before uvicorn's server starts
    print(f"port {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, http=HttpProtocol, proxy_headers=False, lifespan="off"
    )  # as ``gym-mcp-bridge serve`` configures it
    await uvicorn.Server(config).serve(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floors", description="the asgi floor")
    parser.add_argument("--target", required=True, help="host:port to relay to")
    import uvloop

    uvloop.run(serve_asgi(parser.parse_args(argv).target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
