"""The managed upstream's child process: one run of ``boot.py`` under the Gym environment's
interpreter, in its own process group.

``Child.spawn`` starts it with its output piped into a bounded log tail; ``BootInfo.read`` reads the
port file it writes once bound (the host and port it actually took, Gym's server name and version).
``death`` tells whether it has exited (waiting a moment for the exit to be reaped), ``kill_group``
stops it and its descendants. ``process.Upstream`` owns the lifecycle around one child at a time
(startup budget, readiness probes, restarts); this module runs a process and reports on it.

The child's output goes to the bridge's log (logger ``gym_mcp_bridge.upstream``, every line prefixed
``[upstream]``), so an operator sees the upstream's own errors where they see the bridge's (``docker
compose logs``, ``kubectl logs``). Until the upstream is ready its lines are held (at DEBUG): a start
that fails is reported in one line carrying the log tail, and a start that succeeds logs them when
``relay_log`` is called, then every line as it comes. An error report is logged at WARNING: a line that opens one (a
Python traceback, Gym's ``Caught an exception`` report, a ``WARNING:``/``ERROR:``/``CRITICAL:`` line as
uvicorn and the logging module print them, a Python warning) and every line printed in the same burst
after it (within ``REPORT_BURST_S`` of the line before: a traceback and its multi-line message are
printed at once). Everything else is logged at INFO. That is not per-call noise: the boot script runs
uvicorn at ``warning`` (no access lines), so a healthy upstream prints its two startup lines and
whatever its own code prints. The bridge's own keys are not passed on in the child's environment
(``BRIDGE_KEY_VARIABLES``), so an upstream that prints its environment prints no key.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import re
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("gym_mcp_bridge.upstream")

BOOT_SCRIPT = Path(__file__).with_name("boot.py")
LOG_TAIL_LINES = 40
STOP_GRACE_S = 5.0
REPORT_BURST_S = 0.25
HELD_LINES = 200  # the upstream's lines kept from its start until it is ready
BRIDGE_KEY_VARIABLES = frozenset({"GYM_MCP_BRIDGE_SECRET", "GYM_MCP_BRIDGE_API_KEY"})
# A line that opens an error report: a traceback (chained and exception-group ones included), Gym's
# own exception report, a level-prefixed warning or error (uvicorn ``ERROR:    ...``, logging's
# ``WARNING:root:...``, ``[ERROR]``, after a timestamp), a Python warning (``file:12: XWarning: ...``).
REPORT_START = re.compile(
    r"Traceback \(most recent call last\)"
    r"|\U0001f6a8"
    r"|^(?:[\d:,.T/+-]+ +)*\[?(?:WARNING|WARN|ERROR|CRITICAL|FATAL)\b"
    r"|:\d+: \w*Warning: "
)


@dataclass(slots=True)
class BootInfo:
    host: str
    port: int
    server_name: str
    server_class: str
    gym_version: str
    pid: int
    example_rows: str | None = None  # the environment's data/example.jsonl, when it ships one

    @classmethod
    def read(cls, port_file: Path) -> BootInfo | None:
        """What the boot script wrote to its port file once it bound; None before it has."""
        if not port_file.is_file():
            return None
        info = json.loads(port_file.read_text())
        return cls(
            host=info["host"],
            port=int(info["port"]),
            server_name=info["server_name"],
            server_class=info["class"],
            gym_version=info["gym_version"],
            pid=int(info["pid"]),
            example_rows=info.get("example_rows"),
        )

    @property
    def url(self) -> str:
        return f"http://[{self.host}]:{self.port}" if ":" in self.host else f"http://{self.host}:{self.port}"


class Child:
    """One running ``boot.py``: its process, and the last ``LOG_TAIL_LINES`` lines it printed."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.log_tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._held: collections.deque[tuple[float, str]] | None = collections.deque(maxlen=HELD_LINES)
        self._report_until = 0.0  # lines read before this monotonic time continue an error report
        self._reader = asyncio.create_task(self._read_log())

    @classmethod
    async def spawn(cls, python: Path, args: Sequence[str], env: Mapping[str, str]) -> Child:
        proc = await asyncio.create_subprocess_exec(
            str(python),
            str(BOOT_SCRIPT),
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            env={k: v for k, v in env.items() if k not in BRIDGE_KEY_VARIABLES},
        )
        return cls(proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def wait(self) -> int:
        return await self.proc.wait()

    async def death(self, wait_s: float) -> int | None:
        """The exit code when the child has died (waiting up to ``wait_s`` for the exit to be
        reaped: its sockets close a moment before), else None."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), wait_s)
        return self.proc.returncode

    async def kill_group(self) -> None:
        """SIGINT to the process group, SIGKILL after ``STOP_GRACE_S`` (which also reaps
        grandchildren left in the group)."""
        proc = self.proc
        if proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
        except TimeoutError:
            log.warning(
                "upstream did not stop within %.0fs of SIGINT; killing its process group", STOP_GRACE_S
            )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def drain_log(self) -> None:
        """Wait (up to a second) for the lines a dead child printed last."""
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self._reader), 1.0)

    def tail_text(self, lines: int = 10) -> str:
        tail = list(self.log_tail)[-lines:]
        if not tail:
            return ""
        return "; last log lines:\n  " + "\n  ".join(tail)

    def relay_log(self) -> None:
        """The upstream is ready: log the lines held since its start, then every line as it comes."""
        held, self._held = self._held, None
        for read_at, line in held or ():
            self._relay(read_at, line)

    def _relay(self, read_at: float, line: str) -> None:
        if read_at < self._report_until or REPORT_START.search(line):
            self._report_until = read_at + REPORT_BURST_S
            log.warning("[upstream] %s", line)
        else:
            log.info("[upstream] %s", line)

    async def _read_log(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if not line:
                continue
            self.log_tail.append(line)
            if self._held is None:
                self._relay(time.monotonic(), line)
            else:
                self._held.append((time.monotonic(), line))
                log.debug("[upstream] %s", line)


def exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"
