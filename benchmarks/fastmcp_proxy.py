"""A generic OpenAPI -> MCP proxy in front of a Gym resources server: FastMCP ``from_openapi``.

Run by the benchmark under its own interpreter (``.cache/bench/fastmcp-env``, FastMCP pins an MCP SDK
that the bridge's environment does not), out of process like the bridge. The proxy has one HTTP client
with one cookie jar, so every MCP caller shares one Gym session: that is the comparison the issue
draws ("merges every caller into one Gym session"), not a configuration mistake here.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    args = parser.parse_args()
    import httpx
    import uvicorn
    from fastmcp import FastMCP

    client_cls: Any
    try:
        import httpx2

        client_cls = httpx2.AsyncClient
    except ImportError:  # older FastMCP releases take a plain httpx client
        client_cls = httpx.AsyncClient
    spec = httpx.get(f"{args.upstream}/openapi.json", timeout=10).json()
    client = client_cls(base_url=args.upstream, timeout=60)
    mcp = FastMCP.from_openapi(openapi_spec=spec, client=client, name="gym-openapi-proxy")
    try:
        app = mcp.http_app(json_response=True, stateless_http=True, host_origin_protection=False)
    except TypeError:
        app = mcp.http_app(json_response=True, stateless_http=True)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    port = sock.getsockname()[1]
    args.port_file.write_text(json.dumps({"host": "127.0.0.1", "port": port}))
    print(f"fastmcp_proxy: serving {args.upstream} over MCP on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_keep_alive=75)).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
