"""nginx as the capacity benchmark's floor (``benchmarks/capacity.py``): a plain keep-alive reverse
proxy in front of the bare upstream, one non-daemon process with its own generated config, temp
directories and error log (Debian's package: ``scripts/setup-nginx.sh``)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from benchmarks import procs
from benchmarks.procs import BenchError, Proc

NGINX = Path("/usr/sbin/nginx")
CONF = """daemon off;
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


def start(
    workdir: Path, upstream_url: str, core: int | None, name: str = "nginx", poll: float = 0.05
) -> Proc:
    """nginx in front of ``upstream_url`` as one process (pinned to ``core`` when given), with its own
    config and logs in ``workdir/name``; returned once it serves the upstream's ``/openapi.json``
    (polled every ``poll`` seconds)."""
    if not NGINX.exists():
        raise BenchError(f"{NGINX} is missing: run scripts/setup-nginx.sh (Debian's nginx-light)")
    home = workdir / name
    home.mkdir()
    port = procs.free_port()
    conf = home / "nginx.conf"
    conf.write_text(CONF.format(dir=home, upstream=upstream_url.removeprefix("http://"), port=port))
    argv = [
        *(["taskset", "-c", str(core)] if core is not None else []),
        str(NGINX),
        "-p",
        str(home),
        "-c",
        str(conf),
        "-e",
        str(home / "error.log"),
    ]
    proc = procs._spawn(name, argv, workdir)
    proc.url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while procs.http_status(f"{proc.url}/openapi.json") != 200:
        if not proc.alive() or time.monotonic() > deadline:
            proc.stop()
            raise BenchError(f"nginx did not serve:\n{proc.log_tail()}\n{(home / 'error.log').read_text()}")
        time.sleep(poll)
    return proc


def version() -> str | None:
    if not NGINX.exists():
        return None
    out = subprocess.run([str(NGINX), "-v"], capture_output=True, text=True, check=False)
    return (out.stderr or out.stdout).strip()
