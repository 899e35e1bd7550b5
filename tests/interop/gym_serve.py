"""Several of Gym's FastAPI apps served from one process on one event loop (uvicorn), and the
readiness file written once all of them answer: what the Gym servers scripts share
(``gym_collect_servers.py`` for nemo-gym 0.4.0). Runs in a
Gym interpreter; those scripts import it from their own folder (the script's folder is
``sys.path[0]``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn


def bound(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(256)
    return sock


async def serve(apps: list[tuple[Any, str, int]], ready_file: Path, global_config: Any, label: str) -> None:
    """Serve every ``(app, host, port)``; once all have started, write ``global_config`` (JSON) to
    ``ready_file`` (whole, then renamed into place) and print ``label`` to stderr."""
    servers = [
        uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
        for app, _, _ in apps
    ]
    tasks = [
        asyncio.create_task(server.serve(sockets=[bound(host, port)]))
        for server, (_, host, port) in zip(servers, apps, strict=True)
    ]
    while not all(server.started for server in servers):
        if any(task.done() for task in tasks):
            raise SystemExit(f"a server failed to start: {[t.exception() for t in tasks if t.done()]}")
        await asyncio.sleep(0.05)
    ready_file.with_suffix(".tmp").write_text(json.dumps(global_config))
    ready_file.with_suffix(".tmp").replace(ready_file)
    print(label, file=sys.stderr, flush=True)
    await asyncio.gather(*tasks)


def serve_all(apps: list[tuple[Any, str, int]], ready_file: Path, global_config: Any, label: str) -> None:
    asyncio.run(serve(apps, ready_file, global_config, label))
