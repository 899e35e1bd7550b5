"""Command line: ``gym-mcp-bridge serve | replay | client-config`` (also ``python -m bridge``).

``serve`` builds ``Settings`` from ``GYM_MCP_BRIDGE_*`` variables and ``--flags`` (one flag per
settings field, generated from the model), binds the port first (a port in use is a one-line
error), starts or reaches the upstream (a failure is a one-line error plus the upstream's log
tail), then serves the app with uvicorn until SIGTERM/SIGINT, which drains in-flight requests and
stops the upstream. Every startup failure exits 2 with a line that names the fix.

Secrets given as flags (``--secret``, ``--api-key``) are visible to every local user in ``ps``:
``serve`` accepts them but warns once, naming the environment variable and the ``--*-file`` flag to
use instead. ``--api-key-file`` is read here, once, into ``Settings.api_key``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any

import httpx
import uvicorn
from pydantic import SecretStr, ValidationError

from bridge import __version__
from bridge.settings import ENV_PREFIX, Settings, describe_error, is_loopback

log = logging.getLogger("gym_mcp_bridge")


class StartupError(Exception):
    pass


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    for name, field in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        help_text = f"{field.description} [env {ENV_PREFIX}{name.upper()}; default {field.default!r}]"
        if field.annotation is bool:
            parser.add_argument(
                flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            parser.add_argument(flag, dest=name, default=None, metavar=name.upper(), help=help_text)


def settings_from(args: argparse.Namespace) -> Settings:
    given = {
        name: getattr(args, name) for name in Settings.model_fields if getattr(args, name, None) is not None
    }
    try:
        settings = Settings(**given)
    except ValidationError as exc:
        raise StartupError(describe_error(exc)) from exc
    return with_api_key_file(settings)


def with_api_key_file(settings: Settings) -> Settings:
    """``settings`` with ``api_key`` read from ``api_key_file`` (trailing newline stripped), if one is set."""
    path = settings.api_key_file
    if path is None:
        return settings
    where = f"--api-key-file / {ENV_PREFIX}API_KEY_FILE"
    if settings.api_key is not None:
        raise StartupError(f"invalid settings: give api_key or api_key_file, not both ({where})")
    try:
        key = path.read_text().rstrip("\r\n")
    except OSError as exc:
        raise StartupError(
            f"invalid settings: {where}: {path} cannot be read by uid {os.getuid()}: {exc.strerror}"
        ) from exc
    if not key.strip():
        raise StartupError(f"invalid settings: {where}: {path} is empty")
    return settings.model_copy(update={"api_key": SecretStr(key)})


SECRET_FLAGS = {"secret": "--secret-file", "api_key": "--api-key-file"}


def warn_secret_flags(args: argparse.Namespace) -> None:
    """One warning when a secret came as a command-line flag, which any local user can read."""
    given = [name for name in SECRET_FLAGS if getattr(args, name, None) is not None]
    if not given:
        return
    flags = ", ".join("--" + name.replace("_", "-") for name in given)
    instead = " or ".join(f"{ENV_PREFIX}{name.upper()} / {SECRET_FLAGS[name]}" for name in given)
    log.warning(
        "%s given on the command line, where every local user can read it (ps, /proc/<pid>/cmdline); "
        "pass it as %s instead",
        flags,
        instead,
    )


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == 98:
            raise StartupError(
                f"port {port} on {host} is already in use; pass --port or stop the other process"
            ) from exc
        raise StartupError(f"cannot bind {host}:{port}: {exc.strerror}; check --host / --port") from exc
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("httpx", "httpcore", "mcp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))


async def serve(settings: Settings) -> None:
    from bridge.upstream import Upstream, UpstreamStartError

    try:
        keys, generated_key = settings.signing_keys()
    except ValueError as exc:
        raise StartupError(f"cannot use the signing key: {exc}") from exc
    sock = bind(settings.host, settings.port)
    if generated_key:
        log.warning(
            "no secret configured: session tokens are signed with a key generated for this process; "
            "they die with it and no other replica accepts them (set --secret-file or %sSECRET)",
            ENV_PREFIX,
        )
    if not is_loopback(settings.host) and settings.api_key is None:
        log.warning(
            "listening on %s without an api_key: anyone who reaches this port can seed sessions and "
            "call /verify (set --api-key or %sAPI_KEY)",
            settings.host,
            ENV_PREFIX,
        )
    loop = asyncio.get_running_loop()
    starting = asyncio.current_task()
    assert starting is not None
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, starting.cancel)
    upstream = Upstream(settings)
    booting = asyncio.ensure_future(upstream.start())
    try:
        # The MCP SDK takes seconds to import: do it while the upstream boots, not after.
        await asyncio.to_thread(importlib.import_module, "bridge.app")
        from bridge.app import create_app
        from bridge.core import Bridge

        bridge = Bridge(settings, upstream, keys)
        bridge.bound = sock.getsockname()[:2]
        await booting
        await bridge.start()
    except UpstreamStartError as exc:
        await upstream.stop()
        raise StartupError(str(exc)) from exc
    except (httpx.HTTPError, ValueError) as exc:  # the upstream answered, but not with a usable tool list
        await upstream.stop()
        raise StartupError(f"cannot load the tool list from {upstream.url}/openapi.json: {exc}") from exc
    except asyncio.CancelledError:
        booting.cancel()
        await upstream.stop()
        raise StartupError("interrupted while starting the upstream") from None
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    log.info(
        "gym-mcp-bridge %s serving %s on %s (MCP at %s/mcp)",
        __version__,
        bridge.upstream.server_name,
        f"{bridge.bound[0]}:{bridge.bound[1]}",
        bridge.advertise_url,
    )
    config = uvicorn.Config(
        create_app(bridge),
        log_level="warning",
        access_log=False,
        http="httptools",
        proxy_headers=False,  # nothing reads the client address; one ASGI layer less per request
        timeout_graceful_shutdown=int(settings.shutdown_grace_s) or None,
        timeout_keep_alive=75,
        lifespan="on",
    )
    # uvicorn re-raises the signal that stopped it once it has drained; a no-op handler underneath
    # turns that into a clean exit 0 after the graceful shutdown.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: None)
    await uvicorn.Server(config).serve(sockets=[sock])


def _run(coro: Any) -> None:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coro)


def cmd_serve(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    configure_logging(settings.log_level)
    warn_secret_flags(args)
    _run(serve(settings))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gym-mcp-bridge", description="Any NeMo Gym resources server behind MCP and Gym's HTTP contract."
    )
    parser.add_argument("--version", action="version", version=f"gym-mcp-bridge {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve_parser = commands.add_parser(
        "serve", help="serve a resources server over MCP and Gym's HTTP contract"
    )
    add_settings_flags(serve_parser)
    serve_parser.set_defaults(handler=cmd_serve)
    from bridge import client_config, replay

    replay.add_parser(commands)
    client_config.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        args = parser.parse_args(["serve", *(argv or [])])
    try:
        code: int = args.handler(args)
    except StartupError as exc:
        print(f"gym-mcp-bridge: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
