"""The bridge's one settings object.

Every field is read from the environment as ``GYM_MCP_BRIDGE_<FIELD>`` (pydantic-settings) and can
be overridden by a ``--field-name`` flag (``cli`` builds the flags from these fields and passes
the ones given as keyword arguments). Invalid values are rejected when the object is built;
``describe_error`` turns the validation error into one line naming the flag and the variable.
"""

from __future__ import annotations

import ipaddress
import os
import resource
import secrets as _secrets
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "GYM_MCP_BRIDGE_"
DEFAULT_SERVER = "example_session_state_mgmt"
PROJECT_ROOT = Path(__file__).resolve().parent.parent

ToolSource = Literal["row", "openapi"]
# Settings that only a managed upstream reads: refused beside upstream_url rather than ignored.
MANAGED_ONLY = ("resources_server", "upstream_host", "upstream_port", "gym_envs_dir", "restart_upstream")
MIN_KEY_BYTES = 32  # HS256 keys shorter than the hash output weaken it (RFC 7518 section 3.2)
MAKE_KEY = "openssl rand -hex 32"
# Values the project's own examples ship in place of a key: a deployment that kept one is refused.
DEFAULT_STATE_BUDGET_BYTES = 128 * 1024 * 1024
UPSTREAM_SHARE = 4  # by default the upstream's pool may hold a quarter of the open-file limit
PEER_SHARE = 16  # and each owner replica's a sixteenth
MIN_STATE_BUDGET_BYTES = 1024 * 1024
PLACEHOLDER_KEYS = frozenset(
    {"REPLACE-ME-with-the-output-of-openssl-rand-hex-32", "REPLACE-ME-with-another-openssl-rand-hex-32"}
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_default=True)

    host: str = Field("127.0.0.1", description="address the bridge binds")
    port: int = Field(8000, ge=0, le=65535, description="port the bridge binds (0 picks a free one)")
    advertise_url: str | None = Field(
        None, description="absolute base URL put into session metadata (default: from the bound host/port)"
    )
    upstream_url: str | None = Field(None, description="external mode: URL of a running resources server")
    resources_server: str = Field(
        DEFAULT_SERVER,
        description="managed mode: bundled Gym env name, module:Class, or config.yaml[:instance]",
    )
    server_name: str | None = Field(
        None, description="MCP server name and token audience (default: the Gym instance name)"
    )
    server_aliases: Annotated[list[str], NoDecode] = Field(
        [],
        description="other names harness configs give this server, comma-separated; trusted when "
        "resolving prefixed tool names before /verify (the server name always is)",
    )
    gym_python: Path | None = Field(
        None, description="interpreter of the Gym environment (default: .gym-env)"
    )
    gym_envs_dir: Path | None = Field(
        None,
        description="where the environments built from a server's own requirements.txt are cached "
        "(default: .cache/gym-envs in the project)",
    )
    upstream_host: str = Field("127.0.0.1", description="host the managed upstream binds")
    upstream_port: int = Field(0, ge=0, le=65535, description="port the managed upstream binds (0: free)")
    startup_timeout_s: float = Field(240.0, gt=0, description="managed upstream readiness budget")
    secret: SecretStr | None = Field(
        None, description="HMAC key(s) for session tokens, comma-separated; the first signs, all verify"
    )
    secret_file: Path | None = Field(None, description="file holding the key(s), one per line")
    session_ttl_s: float = Field(3600.0, gt=0, description="session and token lifetime")
    max_sessions: int = Field(
        10000,
        ge=1,
        description="unfinished sessions (seeded, not yet verified or closed) before /seed_session answers "
        "503; finished rollouts never count",
    )
    state_budget_bytes: int | None = Field(
        None,
        ge=1024 * 1024,
        description="bytes of session state kept in all (rows, cookies, tokens, call logs, retry answers, "
        "tombstones); finished sessions are released first when it is full, and a seed is refused (503) only "
        "when unfinished sessions alone fill it (default: 128 MiB, or a quarter of the container's memory "
        "limit when that is smaller)",
    )
    tool_timeout_s: float | None = Field(
        None,
        gt=0,
        description="the operator's limit on the upstream's time for one tool call or seed (default: none, "
        "as Gym's own clients set none); the bridge's own waiting (a connection, a forward) never counts, and "
        "a call past it is refused naming it",
    )
    verify_timeout_s: float | None = Field(
        None,
        gt=0,
        description="the same limit for one /verify or /aggregate_metrics (default: none; a judge may take minutes)",
    )
    progress_interval_s: float = Field(
        5.0,
        ge=0.1,
        le=3600,
        description="seconds between MCP notifications/progress on a tools/call that carries a progressToken "
        "and runs longer than this (its answer then comes as an SSE stream)",
    )
    api_key: SecretStr | None = Field(
        None, description="when set, required as 'Authorization: Bearer' on the Gym REST surface"
    )
    api_key_file: Path | None = Field(
        None, description="file holding the api_key (read once at startup; not with api_key)"
    )
    state_dir: Path | None = Field(
        None,
        description="directory where the signing key and the api_key not given otherwise are generated "
        "on first start and kept (files signing_key, api_key, mode 0600; compose: a named volume)",
    )
    api_key_dir: Path | None = Field(
        None,
        description="directory where the api_key not given otherwise is generated and kept, when it must live "
        "apart from the signing key (compose: a volume the quickstart client mounts); default: state_dir",
    )
    tools_from: Annotated[list[ToolSource], NoDecode] = Field(
        ["row", "openapi"], description="where a session's tools come from, first non-empty wins"
    )
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="largest request body accepted")
    max_header_bytes: int = Field(
        32 * 1024, ge=1024, description="largest total size of a request's headers (431 past it)"
    )
    max_json_depth: int = Field(64, ge=4, description="deepest nesting of a JSON body accepted (400 past it)")
    max_argument_bytes: int = Field(
        1024 * 1024, ge=16, description="largest tool-call arguments object, as JSON (413 past it)"
    )
    allowed_hosts: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description="DNS-rebinding protection: Host values accepted besides loopback names, the bound host "
        "and the advertise URL's host (always accepted, any port), comma-separated ('host:*' = any port, "
        "'*' = no check)",
    )
    allowed_origins: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description="Origin values accepted from browsers, comma-separated ('origin:*' = any port); "
        "default: http(s)://<each allowed host>",
    )
    peers: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description="replicas this bridge forwards another replica's sessions to (the owner named in a "
        "token's signed issuer), comma-separated [scheme://]host[:port] patterns ('*.suffix' = any name "
        "under suffix, no port or ':*' = any port); '' = forward nothing (refuse, naming the owner); "
        "default: from advertise_url: its domain suffix, same scheme and port, for a name of 3+ labels "
        "(http://*.bridge.ns.svc:8000); any loopback name, any port, for a loopback URL; else its host, "
        "any port",
    )
    upstream_connections: int | None = Field(
        None,
        ge=1,
        description="connections to the upstream open at once, fixed; a call past them waits for one (queued) "
        "as long as it takes, never fails for it (default: adaptive, from 256 up to a quarter of the raised "
        "open-file limit while the upstream keeps up with the calls waiting)",
    )
    peer_connections: int | None = Field(
        None,
        ge=1,
        description="connections to each other replica open at once, for forwarding (default: a sixteenth "
        "of the open-file limit); a request past them waits for one (queued), never fails for it",
    )
    max_calls_logged: int = Field(10000, ge=0, description="tool calls kept per session for verify")
    max_session_log_bytes: int = Field(
        16 * 1024 * 1024,
        ge=0,
        description="bytes of tool-call log (arguments JSON + output) kept per session for verify; "
        "past it calls still run but the log is incomplete and recorded verify answers 409",
    )
    max_log_bytes: int = Field(
        256 * 1024 * 1024,
        ge=0,
        description="bytes of tool-call log kept across all open sessions; past it calls still run but "
        "the logs they miss are incomplete",
    )
    restart_upstream: bool = Field(True, description="restart a crashed managed upstream (with backoff)")
    shutdown_grace_s: float = Field(
        600.0,
        ge=0,
        description="after SIGTERM, how long the sessions this replica holds are served to their end (it takes "
        "no new ones) before it exits; set the orchestrator's grace period (stop_grace_period, "
        "terminationGracePeriodSeconds) about 20 s above it; 0: stop at once",
    )
    listen_when_ready: bool = Field(
        False,
        description="accept connections only once the upstream is ready and the tools are loaded (for launchers "
        "that take any answer as ready, like Gym's `gym env start`); /healthz is then unreachable while starting",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="log level")
    audit_log: Path | None = Field(
        None,
        description="append one JSON line per tool call served to this file (time, session hash, "
        "tool, outcome, latency)",
    )
    audit_log_arguments: bool = Field(False, description="include each call's arguments in the audit log")

    @field_validator(
        "tools_from", "allowed_hosts", "allowed_origins", "server_aliases", "peers", mode="before"
    )
    @classmethod
    def _split_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("secret", "api_key", mode="before")
    @classmethod
    def _no_empty_key(cls, value: object) -> object:
        # An empty key is a deployment that meant to set one: refusing it keeps an open door from
        # looking shut ("Bearer " with nothing after it would match an empty api_key).
        if isinstance(value, str) and not value.strip():
            raise ValueError(
                f"is set but empty: unset it to use a generated key, or make one with: {MAKE_KEY}"
            )
        return value

    @field_validator("secret_file", "api_key_file", "state_dir", "api_key_dir", mode="before")
    @classmethod
    def _no_empty_path(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            raise ValueError("is set but empty: unset it or give a path")
        return value

    @field_validator("peers")
    @classmethod
    def _peer_patterns(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            from bridge.peers import parse_peers

            parse_peers(value)  # ValueError naming the bad pattern
        return value

    @field_validator("advertise_url", "upstream_url")
    @classmethod
    def _absolute_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")) or "//" not in value[:8] or len(value) < 10:
            raise ValueError(f"must be an absolute http(s) URL, got {value!r}")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if not self.tools_from:
            raise ValueError("tools_from needs at least one of row, openapi")
        if self.secret is not None and self.secret_file is not None:
            raise ValueError("give secret or secret_file, not both")
        if self.secret_file is not None and not self.secret_file.is_file():
            raise ValueError(f"secret_file {self.secret_file} does not exist")
        if self.upstream_url is not None:
            # An external upstream is already running: a managed-mode option beside it would be
            # ignored without a word. (gym_python is not one: the image sets it for every mode.)
            ignored = [name for name in MANAGED_ONLY if name in self.model_fields_set]
            if ignored:
                given = ", ".join(f"--{n.replace('_', '-')} / {ENV_PREFIX}{n.upper()}" for n in ignored)
                raise ValueError(
                    f"--upstream-url / {ENV_PREFIX}UPSTREAM_URL (a server already running) conflicts with {given} "
                    "(managed mode: a server the bridge starts), which would be ignored; give one or the other"
                )
        return self

    @property
    def managed(self) -> bool:
        return self.upstream_url is None

    def signing_keys(self) -> tuple[list[str], bool]:
        """(keys, generated): keys from secret or secret_file, or one random key for this process."""
        if self.secret_file is not None:
            try:
                raw = self.secret_file.read_text()
            except OSError as exc:
                raise ValueError(
                    f"secret_file {self.secret_file} cannot be read by uid {os.getuid()}: {exc.strerror}"
                ) from exc
            keys = [line.strip() for line in raw.splitlines() if line.strip()]
        elif self.secret is not None:
            keys = [k.strip() for k in self.secret.get_secret_value().split(",") if k.strip()]
        else:
            return [_secrets.token_hex(32)], True
        if not keys:
            raise ValueError(f"no signing key given; make one with: {MAKE_KEY}")
        for key in keys:
            if key in PLACEHOLDER_KEYS:
                raise ValueError(
                    f"the signing key is the placeholder shipped in the examples; make one with: {MAKE_KEY}"
                )
            if len(key.encode()) < MIN_KEY_BYTES:
                raise ValueError(
                    f"every signing key must be at least {MIN_KEY_BYTES} bytes (one is {len(key.encode())}); "
                    f"make one with: {MAKE_KEY}"
                )
        return keys, False

    def resolved_state_budget(self) -> int:
        """``state_budget_bytes``, else 128 MiB capped at a quarter of the cgroup's memory limit."""
        if self.state_budget_bytes is not None:
            return self.state_budget_bytes
        limit = memory_limit()
        budget = DEFAULT_STATE_BUDGET_BYTES
        return max(MIN_STATE_BUDGET_BYTES, min(budget, limit // 4)) if limit else budget

    def connection_bounds(self, open_files: int | None = None) -> tuple[int, int]:
        """(upstream_connections, peer_connections): the settings, else shares of ``open_files`` (the
        soft open-file limit now, which ``serve`` has raised to the hard one): a quarter to the
        upstream and a sixteenth to each owner replica, so the upstream, four owners at their bounds
        and as many client connections fit (``bridge.limits.connection_budget``)."""
        files = soft_open_files() if open_files is None else open_files
        upstream = self.upstream_connections or max(16, files // UPSTREAM_SHARE)
        peers = self.peer_connections or max(8, files // PEER_SHARE)
        return upstream, peers

    def resolved_gym_python(self) -> Path:
        if self.gym_python is not None:
            return self.gym_python
        return PROJECT_ROOT / ".gym-env" / "bin" / "python"


def soft_open_files() -> int:
    """This process's soft ``RLIMIT_NOFILE`` now (unlimited: 1,048,576, Linux's usual ceiling)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1_048_576 if soft == resource.RLIM_INFINITY else soft


def memory_limit(
    paths: tuple[str, ...] = (
        "/sys/fs/cgroup/memory.max",  # cgroup v2
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",  # cgroup v1
    ),
) -> int | None:
    """This process's cgroup memory limit in bytes (a container's ``--memory``), None when unlimited."""
    for path in paths:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # v1 writes a huge number for "no limit"
            return int(text)
        return None
    return None


def advertise_url(settings: Settings, bound: tuple[str, int]) -> str:
    """The base URL put into session metadata: the setting, else the bound address (a wildcard bind
    advertises 127.0.0.1)."""
    if settings.advertise_url:
        return settings.advertise_url
    host, port = bound
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def is_loopback(host: str) -> bool:
    """Whether a bind address (``127.0.0.1``, ``[::1]``, ``localhost``) is reachable only locally."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def describe_error(error: ValidationError) -> str:
    """One line per invalid field: the flag, the variable, and what is wrong."""
    parts = []
    for item in error.errors():
        field = str(item["loc"][0]) if item["loc"] else ""
        message = item["msg"].removeprefix("Value error, ")
        if field:
            given = item.get("input")
            shown = (
                f" (got {given!r})"
                if not isinstance(given, dict) and field not in ("secret", "api_key")
                else ""
            )
            parts.append(f"--{field.replace('_', '-')} / {ENV_PREFIX}{field.upper()}: {message}{shown}")
        else:
            parts.append(message)
    return "invalid settings: " + "; ".join(parts)
