"""Command line: ``gym-mcp-bridge serve | replay | client-config | show-config | gym-entry | provenance``
(also ``python -m bridge``).

``serve`` builds ``Settings`` from ``GYM_MCP_BRIDGE_*`` variables and ``--flags`` (one flag per
settings field, generated from the model), binds the port first (a port in use is a one-line
error) and serves ``ServingApp`` with uvicorn at once: the probes answer while it starts or reaches
the upstream behind them (a failure is a one-line error plus the upstream's log tail), then the app
serves until a signal. SIGTERM drains the sessions this replica holds (``ServingApp.on_sigterm``:
``/readyz`` 503, seeds refused, the port kept open until each session is finished or
``shutdown_grace_s`` ends), then uvicorn stops, letting answers in flight finish within
``REQUEST_DRAIN_S``, and the upstream is stopped; SIGINT, or a second signal, stops at once. Every
startup failure exits 2 with a line that names the fix.

Secrets given as flags (``--secret``, ``--api-key``) are visible to every local user in ``ps``:
``serve`` accepts them but warns once, naming the environment variable and the ``--*-file`` flag to
use instead. ``--api-key-file`` is read here, once, into ``Settings.api_key``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import SecretStr, ValidationError

from bridge import __version__, limits
from bridge.settings import ENV_PREFIX, MAKE_KEY, PLACEHOLDER_KEYS, Settings, describe_error, is_loopback

log = logging.getLogger("gym_mcp_bridge")


REQUEST_DRAIN_S = 10  # after the session drain: answers still being written


class StartupError(Exception):
    pass


class BridgeServer(uvicorn.Server):
    """uvicorn's server with the bridge's signals: the first SIGTERM drains the sessions held
    (``on_sigterm``, run on the event loop) while uvicorn keeps accepting; SIGINT or a second
    signal stops at once (``on_stop``: answers in flight are cancelled, each refused in Gym's words;
    the upstream is still stopped)."""

    def __init__(
        self, config: uvicorn.Config, on_sigterm: Callable[[], None], on_stop: Callable[[], None]
    ) -> None:
        super().__init__(config)
        self.on_sigterm = on_sigterm
        self.on_stop = on_stop
        self.loop: asyncio.AbstractEventLoop | None = None
        self.signalled = False

    def handle_exit(self, sig: int, frame: Any) -> None:
        if sig == signal.SIGTERM and not self.signalled and self.loop is not None:
            self.signalled = True
            self.loop.call_soon_threadsafe(self.on_sigterm)
            return
        self.signalled = True
        self.on_stop()
        self.config.timeout_graceful_shutdown = 0
        self.should_exit = True


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


def settings_from(args: argparse.Namespace) -> tuple[Settings, list[str]]:
    """The settings ``serve`` runs with, and lines to log once logging is on (where keys are kept)."""
    given = {
        name: getattr(args, name) for name in Settings.model_fields if getattr(args, name, None) is not None
    }
    try:
        settings = Settings(**given)
    except ValidationError as exc:
        raise StartupError(describe_error(exc)) from exc
    settings, notes = with_state_dir(settings)
    settings = with_api_key_file(settings)
    if settings.api_key is not None and settings.api_key.get_secret_value() in PLACEHOLDER_KEYS:
        raise StartupError(
            f"invalid settings: the api_key is the placeholder shipped in the examples; make one with: {MAKE_KEY}"
        )
    return settings, notes


def with_state_dir(settings: Settings) -> tuple[Settings, list[str]]:
    """``settings`` using the keys of ``state_dir`` (generated on first start) where none is given,
    and one line per such key saying where it is (never the key)."""
    from bridge.commands import keyfiles

    try:
        settings, files = keyfiles.use_state_dir(settings)
    except ValueError as exc:
        raise StartupError(f"invalid settings: {exc}") from exc
    notes = []
    for name, found in files.items():
        what = "signing key" if name == keyfiles.SIGNING_KEY else "REST API key"
        when = "generated on this first start" if found.created else "kept from an earlier start"
        hint = (
            "; print it and the MCP URL with: gym-mcp-bridge show-config "
            "(compose: docker compose exec bridge gym-mcp-bridge show-config)"
            if name == keyfiles.API_KEY
            else ""
        )
        notes.append(f"{what}: {found.path} ({when}){hint}")
    return settings, notes


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


def bind(host: str, port: int, listen: bool = True) -> socket.socket:
    """The bridge's socket, bound (a port in use is a one-line error). Unless ``listen``, it refuses
    connections until uvicorn starts serving on it, which it does after the app's startup."""
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
    if listen:
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


async def serve(settings: Settings, notes: Sequence[tuple[int, str]] = ()) -> None:
    """Bind, then serve at once: ``ServingApp`` answers the probes while it starts the bridge
    behind them, and a start that fails ends ``serve`` with its one-line reason (exit 2). ``notes``
    (level, line) are logged once the bridge serves (a failed start stays one line)."""
    from bridge import tracing
    from bridge.http.serving import ServingApp
    from bridge.http.wire import HttpProtocol
    from bridge.upstream import Upstream

    if tracing.configure(__version__):
        log.info("tracing on: spans go where the OTEL_* environment says")

    try:
        keys, generated_key = settings.signing_keys()
    except ValueError as exc:
        raise StartupError(f"cannot use the signing key: {exc}") from exc
    sock = bind(settings.host, settings.port, listen=not settings.listen_when_ready)
    if generated_key:
        log.warning(
            "no secret configured: session tokens are signed with a key generated for this process; "
            "they die with it and no other replica accepts them (set --secret-file or %sSECRET)",
            ENV_PREFIX,
        )
    if not is_loopback(settings.host) and settings.api_key is None:
        log.warning(
            "listening on %s without an api_key: anyone who reaches this port can seed sessions and "
            "call /verify (set --api-key-file or %sAPI_KEY)",
            settings.host,
            ENV_PREFIX,
        )
    started: list[uvicorn.Server] = []  # the server the app asks to stop when the start fails
    front = ServingApp(
        settings,
        Upstream(settings),
        keys,
        sock.getsockname()[:2],
        lambda: setattr(started[0], "should_exit", True),
        lambda: started[0].should_exit,
    )
    front.notes.extend(notes)
    config = uvicorn.Config(
        front,
        log_level="warning",
        access_log=False,
        http=HttpProtocol,  # uvicorn's httptools protocol, each answer in one write (bridge/http/wire.py)
        proxy_headers=False,  # nothing reads the client address; one ASGI layer less per request
        timeout_graceful_shutdown=REQUEST_DRAIN_S,
        timeout_keep_alive=75,
        lifespan="on",
    )
    server = BridgeServer(config, front.on_sigterm, front.stop_now)
    server.loop = asyncio.get_running_loop()
    started.append(server)
    # A no-op handler underneath uvicorn's: a signal after it has restored them is no traceback.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: None)
    try:
        await server.serve(sockets=[sock])
    except SystemExit:  # uvicorn's exit after a startup the app failed (listen_when_ready)
        if front.failure is None:
            return
    finally:
        tracing.shutdown()
    if front.failure is not None:
        raise StartupError(front.failure)


def _run(coro: Any, connection_limit: int) -> None:
    from bridge.http import accept

    with asyncio.Runner(loop_factory=lambda: accept.new_event_loop(connection_limit)) as runner:
        runner.run(coro)


def cmd_serve(args: argparse.Namespace) -> int:
    settings, notes = settings_from(args)
    configure_logging(settings.log_level)
    warn_secret_flags(args)
    for note in notes:
        log.info("%s", note)
    # Once per process, before anything is opened or spawned: the managed upstream inherits it.
    open_files = limits.raise_open_files()
    upstream_connections, peer_connections = settings.connection_bounds(open_files.soft)
    connection_limit = limits.connection_budget(open_files.soft, upstream_connections, peer_connections)
    note = (
        f"{open_files.message}; at most {connection_limit} client connections open at once, "
        f"{upstream_connections} to the upstream, {peer_connections} to each other replica"
    )
    _run(serve(settings, [(logging.WARNING if open_files.failed else logging.INFO, note)]), connection_limit)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gym-mcp-bridge", description="Any NeMo Gym resources server behind MCP and Gym's HTTP contract."
    )
    parser.add_argument("--version", action="version", version=f"gym-mcp-bridge {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve_parser = commands.add_parser(
        "serve",
        help="serve a resources server over MCP and Gym's HTTP contract",
        description="Serve a NeMo Gym resources server over MCP (streamable HTTP at /mcp) and Gym's own "
        "HTTP contract (/seed_session, POST /<tool>, /verify) on one port. Managed mode (the default) "
        "starts the server named by --resources-server (a bundled Gym environment, module:Class, or "
        "config.yaml[:instance]) in the Gym environment's interpreter; external mode reaches one already "
        "running at --upstream-url (the two are exclusive). Probes: /healthz (alive), /readyz (ready). "
        f"Every flag below is also an environment variable {ENV_PREFIX}<FLAG>; a port already in use "
        "stops it at once with one line. Settings reference: docs/reference.md.",
    )
    add_settings_flags(serve_parser)
    serve_parser.set_defaults(handler=cmd_serve)
    from bridge.commands import client_config, gym_entry, replay, show_config

    replay.add_parser(commands)
    gym_entry.add_parser(commands)
    client_config.add_parser(commands)
    show_config.add_parser(commands)
    add_provenance_parser(commands)
    return parser


def add_provenance_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "provenance",
        help="re-check the provenance of stored verify answers",
        description="Re-check _bridge.provenance of stored /verify answers (a JSON file, or JSONL with one "
        "answer per line) with the deployment's signing key(s) from GYM_MCP_BRIDGE_SECRET or "
        "--secret-file. Exit 0 when every tool call of every answer was served by the bridge for its "
        "session, 1 otherwise, 2 on bad input.",
    )
    parser.add_argument("action", choices=["check"])
    parser.add_argument("answers", type=Path, help="stored verify answer(s): .json or .jsonl")
    parser.add_argument("--secret-file", type=Path, help="file holding the key(s), one per line")
    parser.set_defaults(handler=cmd_provenance)


def cmd_provenance(args: argparse.Namespace) -> int:
    from bridge.scoring import provenance

    try:
        given = {"secret_file": args.secret_file} if args.secret_file else {}
        keys, generated = Settings.model_validate(given).signing_keys()
        if generated:
            raise ValueError(f"no signing key: set {ENV_PREFIX}SECRET or pass --secret-file")
        answers = _json_or_jsonl(args.answers.read_text())
        failed = 0
        for index, answer in enumerate(answers):
            for verdict in provenance.check(answer, keys):
                failed += not verdict.ok
                print(f"{index}\t{verdict.call_id}\t{'ok' if verdict.ok else 'FAIL'}\t{verdict.reason}")
    except (OSError, ValueError, ValidationError) as exc:
        print(f"gym-mcp-bridge provenance: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(f"{failed} of the checks failed" if failed else "every call was served by the bridge")
    return 1 if failed else 0


def _json_or_jsonl(text: str) -> list[Any]:
    """One JSON object, or one per line."""
    try:
        return [json.loads(text)]
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


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
