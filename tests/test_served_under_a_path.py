"""The bridge served under a path behind a real reverse proxy (nginx from Debian's ``nginx-light``,
installed by the test when missing): ``advertise_url``'s path is the mount path. The seed metadata's
``url`` and ``url_path`` carry it; a proxy that strips it and one that passes it on both work, and so
does a Gym agent joining ``url_path`` to the bridge's own address (what Gym 0.7's agents do)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks import procs
from tests.fixtures.bridges import HEADER, counter_row, mcp_client

EMPTY_RESPONSE = {
    "id": "resp_1",
    "created_at": 0,
    "model": "stub",
    "object": "response",
    "output": [],
    "parallel_tool_calls": False,
    "tool_choice": "auto",
    "tools": [],
}


def nginx_binary() -> str:
    """nginx from Debian (``nginx-light``), installed here when missing: a small real reverse proxy."""
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-q", "nginx-light"]
        if subprocess.run(install, env=env, capture_output=True, timeout=600).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600)
            subprocess.run(install, env=env, capture_output=True, timeout=600)
        found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("nginx is missing and could not be installed (apt-get install nginx-light)")
        pytest.skip("nginx is missing (apt-get install nginx-light)")
    return found


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Any]:
    procs_: list[subprocess.Popen[bytes]] = []

    def start(*locations: str) -> list[str]:
        """One nginx, one server (own port) per ``location`` block; their base URLs."""
        ports = [procs.free_port() for _ in locations]
        for directory in ("logs", "tmp"):
            (tmp_path / directory).mkdir(exist_ok=True)
        servers = "".join(
            f"  server {{ listen 127.0.0.1:{port};\n    {location}\n  }}\n"
            for port, location in zip(ports, locations, strict=True)
        )
        conf = tmp_path / "nginx.conf"
        conf.write_text(
            "daemon off; worker_processes 1; pid nginx.pid; error_log logs/error.log;\n"
            "events { worker_connections 64; }\n"
            "http { access_log logs/access.log; client_body_temp_path tmp; proxy_temp_path tmp;\n"
            f"{servers}}}\n"
        )
        proc = subprocess.Popen(
            [nginx_binary(), "-p", str(tmp_path), "-c", str(conf)], stderr=subprocess.PIPE
        )
        procs_.append(proc)
        deadline = time.monotonic() + 20
        while procs.http_status(f"http://127.0.0.1:{ports[-1]}/nothing") is None:
            assert proc.poll() is None and time.monotonic() < deadline, (
                proc.stderr.read() if proc.stderr else ""
            )
            time.sleep(0.05)
        return [f"http://127.0.0.1:{port}" for port in ports]

    yield start
    for proc in procs_:
        proc.terminate()
        proc.wait(10)


@pytest.mark.anyio
async def test_served_under_a_path_behind_nginx(spawn_bridge: Any, nginx: Any) -> None:
    """nginx serves the bridge at ``/envs/counter/``, on one port stripping the path (the usual
    ``proxy_pass`` with a trailing slash), on another passing it on (an ingress without a rewrite).
    The bridge advertises the first; harnesses reach it through the proxy by the ``url`` it hands out,
    and a Gym agent joining ``url_path`` to the bridge's own address reaches it too."""
    port = procs.free_port()
    proxy, keeping = nginx(
        f"location /envs/counter/ {{ proxy_pass http://127.0.0.1:{port}/; proxy_http_version 1.1; }}",
        f"location /envs/counter/ {{ proxy_pass http://127.0.0.1:{port}; proxy_http_version 1.1; }}",
    )
    base = f"{proxy}/envs/counter"
    bridge = spawn_bridge(["--advertise-url", base], port=port)
    ready = httpx.get(f"{base}/readyz", timeout=30).json()  # its advertise check went through nginx
    assert ready["ready"] is True and "warnings" not in ready, ready
    seed = httpx.post(f"{base}/seed_session", json=counter_row(1, 3), timeout=30)
    assert seed.status_code == 200, seed.text
    meta = seed.json()["mcp"]
    assert meta["url"] == f"{base}/mcp"
    assert meta["url_path"] == "/envs/counter/mcp"
    token = meta["headers"][HEADER]
    async with mcp_client(meta["url"], token) as client:  # through nginx, by the url handed out
        result = await client.call_tool("increment_counter", {"count": 1})
        assert not result.is_error
    # a Gym agent joins url_path to the resources server's base URL (here the bridge itself)
    async with mcp_client(f"{bridge.url}{meta['url_path']}", token) as client:
        assert not (await client.call_tool("increment_counter", {"count": 1})).is_error
    kept = httpx.post(
        f"{keeping}/envs/counter/ng-rollout/9-9/get_counter_value",
        json={},
        headers={HEADER: token},
        timeout=30,
    )
    assert kept.json() == {"count": 3}
    verify = httpx.post(
        f"{base}/verify",
        json={**counter_row(1, 3), "response": EMPTY_RESPONSE},
        headers={HEADER: token},
        timeout=60,
    )
    assert verify.json()["reward"] == 1.0
    assert httpx.post(f"{bridge.url}/seed_session", json=counter_row(1), timeout=30).status_code == 200
