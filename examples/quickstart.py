"""Play one full rollout against a running bridge with the official MCP SDK client.

    .venv/bin/python examples/quickstart.py                       # against `make run` (127.0.0.1:8000)
    python examples/quickstart.py --url http://localhost:8000     # against `docker compose up`
    docker compose run --rm quickstart                            # from the image, on the compose network

Needs only the MCP SDK and httpx (``pip install "mcp>=2.3,<3" httpx``). The REST API key, when the
bridge requires one: ``--api-key``, else ``GYM_MCP_BRIDGE_API_KEY``, else ``--api-key-file`` /
``GYM_MCP_BRIDGE_API_KEY_FILE``, else, run from this repository with a compose deployment up, the
key compose generated (``docker compose exec -T bridge gym-mcp-bridge show-config --json``) -- but
only when ``--url`` is that deployment: a loopback address on the port its ``bridge`` service
publishes. A found key is never sent to any other URL; the quickstart says which it did.

It plays Gym's counter environment, ``example_session_state_mgmt`` (the bridge's default, what
``make run`` serves), and refuses a bridge that serves another one, in one line naming the fix.
Seeds a session from the first row of that environment's data ("add 1 then add
2 then get the count", starting at 3), lists the session's tools over MCP, calls them as an agent
would, and asks the bridge to score the rollout from its own record of the calls. Prints each step
and the reward (1.0: the counter ended at the row's expected_count, 6). Exit 0 on reward 1.0; any
failure is one line saying what to do, exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

ROW = {
    "responses_create_params": {
        "input": [{"content": "add 1 then add 2 then get the count", "role": "user"}],
        "tools": [
            {
                "name": "increment_counter",
                "parameters": {
                    "type": "object",
                    "properties": {"count": {"type": "integer", "description": ""}},
                    "required": ["count"],
                    "additionalProperties": False,
                },
                "strict": True,
                "type": "function",
                "description": "",
            },
            {
                "name": "get_counter_value",
                "parameters": {
                    "type": "object",
                    "properties": {},
                    "required": [],
                    "additionalProperties": False,
                },
                "strict": True,
                "type": "function",
                "description": "",
            },
        ],
    },
    "expected_count": 6,
    "initial_count": 3,
}
ENVIRONMENT = "example_session_state_mgmt"  # the counter: the only environment ROW is a row of
REPO = Path(__file__).resolve().parent.parent
SHOW_CONFIG = "docker compose exec bridge gym-mcp-bridge show-config"


class Failed(Exception):
    """One line for the user: what went wrong and what to do."""


def compose_deployment() -> dict[str, Any] | None:
    """This repository's compose deployment, if one is up here: its project and the (host, port)
    pairs its ``bridge`` service publishes."""
    if not (REPO / "compose.yaml").is_file() or shutil.which("docker") is None:
        return None
    try:
        listed = subprocess.run(
            ["docker", "compose", "ps", "--format", "json", "bridge"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if listed.returncode != 0 or not listed.stdout.strip():
            return None
        text = listed.stdout.strip()
        # Compose prints one object per line (older releases: one array).
        rows = json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines()]
        row = rows[0]
        published = {
            (str(p.get("URL") or ""), int(p["PublishedPort"]))
            for p in row.get("Publishers") or []
            if p.get("PublishedPort")
        }
        return {"project": str(row["Project"]), "published": published}
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError, IndexError):
        return None


def is_published_at(deployment: dict[str, Any], url: str) -> bool:
    """Whether ``url`` reaches ``deployment``'s bridge: a loopback host on a port the deployment
    publishes (on that loopback address or on every address). Only then is its key sent."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        return False
    everywhere = {"", "0.0.0.0", "::"}
    return any(
        published == port and (bound in everywhere or bound == host or host == "localhost")
        for bound, published in deployment["published"]
    )


def compose_api_key(url: str) -> tuple[str | None, str]:
    """(the key of this repository's compose deployment, where it came from) when ``url`` is that
    deployment; (None, why not) otherwise."""
    deployment = compose_deployment()
    if deployment is None:
        return None, "no compose deployment of this repository is up here"
    project = deployment["project"]
    if not is_published_at(deployment, url):
        where = ", ".join(f"{h or '0.0.0.0'}:{p}" for h, p in sorted(deployment["published"])) or "no port"
        return None, (
            f"the compose deployment here (project {project}, published at {where}) is not {url}, "
            "so its key is not sent there"
        )
    try:
        shown = subprocess.run(
            ["docker", "compose", "exec", "-T", "bridge", "gym-mcp-bridge", "show-config", "--json"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        key = json.loads(shown.stdout)["api_key"] if shown.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        key = None
    if not isinstance(key, str) or not key:
        return None, f"the compose deployment here (project {project}) did not show its key"
    return key, f"compose project {project}"


def api_key_from(args: argparse.Namespace) -> tuple[str | None, str]:
    """(key, where it came from)."""
    if args.api_key:
        return args.api_key, "--api-key"
    given = os.environ.get("GYM_MCP_BRIDGE_API_KEY")
    if given is not None:
        if not given.strip():
            raise Failed("GYM_MCP_BRIDGE_API_KEY is set but empty: unset it or give the deployment's key")
        return given, "GYM_MCP_BRIDGE_API_KEY"
    if args.api_key_file:
        try:
            key = Path(args.api_key_file).read_text().strip()
        except OSError as exc:
            raise Failed(f"cannot read the API key file {args.api_key_file}: {exc.strerror}") from exc
        if not key:
            raise Failed(f"the API key file {args.api_key_file} is empty")
        return key, str(args.api_key_file)
    return None, ""


def detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip().splitlines()[0][:300] if response.text.strip() else "(empty body)"
    if isinstance(body, dict):
        return str(body.get("detail") or body.get("reason") or body)[:300]
    return str(body)[:300]


def check_ready(http: httpx.Client, url: str) -> dict[str, Any]:
    """/readyz and /healthz of the bridge at url, or Failed saying why it cannot be used yet."""
    try:
        ready = http.get("/readyz")
    except httpx.ConnectError as exc:
        raise Failed(
            f"no bridge answers at {url} ({exc}): start one with `make run` or `docker compose up -d "
            "--wait`, or pass --url"
        ) from exc
    except httpx.HTTPError as exc:
        raise Failed(
            f"{url} did not answer /readyz ({exc.__class__.__name__}: {exc}); is it a bridge?"
        ) from exc
    if ready.status_code == 503:
        raise Failed(f"the bridge at {url} is not ready yet: {detail(ready)}; retry in a few seconds")
    if ready.status_code != 200:
        raise Failed(f"{url}/readyz answered {ready.status_code} ({detail(ready)}); is it a bridge?")
    health = http.get("/healthz")
    return dict(health.json()) if health.status_code == 200 else {}


def check_environment(http: httpx.Client, url: str, health: dict[str, Any]) -> None:
    """Failed unless the bridge at url serves the counter (by name, or by its two tools when it was
    given another --server-name)."""
    served = str((health.get("upstream") or {}).get("server_name") or "an unknown environment")
    if served == ENVIRONMENT:
        return
    try:
        document = http.get("/openapi.json")
        paths = set(document.json().get("paths") or {}) if document.status_code == 200 else set()
    except (httpx.HTTPError, ValueError, AttributeError):
        paths = set()
    if {"/increment_counter", "/get_counter_value"} <= paths:
        return
    raise Failed(
        f"the bridge at {url} serves {served}, but this quickstart plays the counter environment "
        f"({ENVIRONMENT}): start one with `make run` (no ARGS) and retry, or pass --url of a bridge serving it"
    )


def seed(http: httpx.Client, url: str, key: str | None, key_from: str) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    answer = http.post("/seed_session", json=ROW, headers=headers)
    if answer.status_code == 401 and not key:
        why = f" ({key_from})" if key_from else ""
        raise Failed(
            f"the bridge at {url} requires an API key{why}: pass --api-key KEY, set GYM_MCP_BRIDGE_API_KEY "
            f"or pass --api-key-file FILE (compose: `{SHOW_CONFIG}` prints it)"
        )
    if answer.status_code == 401:
        raise Failed(
            f"the bridge at {url} refused the API key from {key_from} ({detail(answer)}): "
            f"use the deployment's key (compose: `{SHOW_CONFIG}` prints it)"
        )
    if answer.status_code != 200:
        raise Failed(f"POST {url}/seed_session answered {answer.status_code}: {detail(answer)}")
    return dict(answer.json())


async def play(url: str, seeded: dict[str, Any], key: str | None) -> float:
    mcp = seeded["mcp"]
    # The MCP endpoint at the URL given (a published port, a Service, the compose service name):
    # a bridge forwards a session it does not own to its owner, so this works with replicas too.
    endpoint = f"{url}{mcp['url_path']}"
    also = f" (the bridge advertises {mcp['url']})" if mcp["url"] != endpoint else ""
    print(f"seeded a session on {mcp['server_name']}; MCP endpoint {endpoint}{also}")
    async with (
        httpx2.AsyncClient(headers=mcp["headers"], timeout=60) as mcp_http,
        Client(streamable_http_client(endpoint, http_client=mcp_http), mode="legacy") as client,
    ):
        print(f"negotiated MCP protocol revision {client.protocol_version}")
        tools = [tool.name for tool in (await client.list_tools()).tools]
        print(f"tools: {', '.join(tools)}")
        for count in (1, 2):
            result = await client.call_tool("increment_counter", {"count": count})
            print(f"increment_counter(count={count}) -> {result.content[0].text}")  # type: ignore[union-attr]
        value = await client.call_tool("get_counter_value", {})
        print(f"get_counter_value() -> {value.content[0].text}")  # type: ignore[union-attr]
    headers = {**mcp["headers"], **({"authorization": f"Bearer {key}"} if key else {})}
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        answer = await http.post(
            "/verify",
            json={"trajectory": {"format": "recorded", "final_text": "The count is 6."}},
            headers=headers,
        )
    if answer.status_code != 200:
        raise Failed(f"POST {url}/verify answered {answer.status_code}: {detail(answer)}")
    verdict = answer.json()
    report = dict(verdict["_bridge"])
    calls = report.pop("provenance")["calls"].values()
    print(f"bridge report: {json.dumps(report)}")
    print(f"provenance: {sum(c['served'] for c in calls)} of {len(calls)} calls served by the bridge, signed")
    print(f"reward: {verdict['reward']}")
    return float(verdict["reward"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=f"{(__doc__ or '').splitlines()[0]} It plays the counter environment ({ENVIRONMENT})."
    )
    parser.add_argument(
        "--url",
        "--bridge-url",
        default=os.environ.get("GYM_MCP_BRIDGE_URL", "http://127.0.0.1:8000"),
        help="the bridge's base URL [env GYM_MCP_BRIDGE_URL; default http://127.0.0.1:8000]",
    )
    parser.add_argument(
        "--api-key", help="the REST API key (prefer GYM_MCP_BRIDGE_API_KEY: flags show in ps)"
    )
    parser.add_argument(
        "--api-key-file",
        default=os.environ.get("GYM_MCP_BRIDGE_API_KEY_FILE"),
        help="file holding the REST API key [env GYM_MCP_BRIDGE_API_KEY_FILE]",
    )
    args = parser.parse_args(argv)
    url = args.url.rstrip("/")
    try:
        key, key_from = api_key_from(args)
        with httpx.Client(base_url=url, timeout=60) as http:
            health = check_ready(http, url)
            check_environment(http, url, health)
            if key is None and health.get("rest_auth") == "api_key":
                key, key_from = compose_api_key(url)
                if key is not None:
                    print(f"using the API key of {key_from} (show-config), for {url} only")
            seeded = seed(http, url, key, key_from)
        reward = asyncio.run(play(url, seeded, key))
    except Failed as exc:
        print(f"quickstart: {exc}", file=sys.stderr)
        return 1
    except (httpx.HTTPError, httpx2.HTTPError) as exc:
        print(
            f"quickstart: the connection to {url} failed mid-rollout ({exc.__class__.__name__}: {exc})",
            file=sys.stderr,
        )
        return 1
    return 0 if reward == 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
