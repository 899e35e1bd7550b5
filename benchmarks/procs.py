"""Processes under test, for every benchmark and the tests that start servers: the Gym upstream (and
its boot), the bare upstream, the bridge; free ports; CPU and memory read from /proc."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bridge.upstream import BootInfo

ROOT = Path(__file__).resolve().parent.parent
GYM_PYTHON = ROOT / ".gym-env" / "bin" / "python"
BOOT = ROOT / "bridge" / "upstream" / "boot.py"
BRIDGE = [sys.executable, "-m", "bridge"]
SECRET = "bench-secret-0123456789abcdef0123456789abcdef"
SERVER = "example_session_state_mgmt"
_TICKS = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    pass


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_GIVEN: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, for a server started later that binds it itself.

    Not ``bind(0)``: the kernel picks that port from the ephemeral range, the one every outgoing
    connection takes its local port from, so any ``connect()`` on the machine can take it before the
    server binds (a Gym agent server once failed with "address already in use" that way). Ports below
    the range are only ever taken by an explicit bind; one process never gets the same port twice.
    """
    low = min(_ephemeral_low(), 65536)
    rng = random.SystemRandom()
    for _ in range(200) if low > 12000 else ():
        port = rng.randrange(10000, low)
        if port in _GIVEN:
            continue
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    with socket.socket() as sock:  # no room below the ephemeral range: the kernel's choice
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def http_status(url: str, timeout: float = 2.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` (nanosecond schedstat where available, else clock ticks)."""
    total = 0.0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError):
                total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0]) / 1e9
        if total:
            return total
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except OSError:
        return 0.0


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of ``pid`` in KiB."""
    out = {"rss_kb": 0, "hwm_kb": 0}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_kb"] = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                out["hwm_kb"] = int(line.split()[1])
    return out


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    url: str = ""
    log: Path | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def memory(self) -> dict[str, int]:
        return memory_kb(self.pid)

    def log_tail(self, lines: int = 15) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to this process's own group (it was started in a new session), then SIGKILL."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)


def port_line(proc: Proc, timeout: float = 30) -> int:
    """The port a benchmark instrument (``bare_upstream``, the ``asgi`` floor) listens on: its first output
    line is ``port N``. BenchError (the process stopped) if it exits or says nothing in time."""
    deadline = time.monotonic() + timeout
    while True:
        first = (
            proc.log.read_text(errors="replace").split("\n", 1)[0] if proc.log and proc.log.exists() else ""
        )
        if first.startswith("port ") and first[5:].isdigit():
            return int(first[5:])
        if not proc.alive() or time.monotonic() > deadline:
            proc.stop()
            raise BenchError(f"{proc.name} did not start:\n{proc.log_tail()}")
        time.sleep(0.02)


def start_bare_upstream(workdir: Path, pin: list[str] | None = None) -> Proc:
    """``benchmarks/bare_upstream.py`` (process ``upstream``), serving; ``pin``: a ``taskset`` prefix."""
    proc = _spawn("upstream", [*(pin or []), sys.executable, "-m", "benchmarks.bare_upstream"], workdir)
    proc.url = f"http://127.0.0.1:{port_line(proc)}"
    return proc


def _spawn(name: str, argv: list[str], workdir: Path, env: dict[str, str] | None = None) -> Proc:
    log = workdir / f"{name}.log"
    popen = subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return Proc(name=name, popen=popen, log=log)


def wait_for_boot(
    popen: subprocess.Popen[bytes], port_file: Path, log: Path | None, timeout: float
) -> BootInfo:
    """What a Gym boot script (``bridge/upstream/boot.py``) wrote to its port file, once it has and
    its ``/openapi.json`` answers; BenchError with its log tail if it dies or ``timeout`` passes.
    The benchmarks and the tests start upstreams with this."""
    deadline = time.monotonic() + timeout
    tail = (lambda: "\n".join(log.read_text(errors="replace").splitlines()[-15:])) if log else (lambda: "")
    info = BootInfo.read(port_file)
    while info is None:
        if popen.poll() is not None:
            raise BenchError(f"the upstream exited with {popen.returncode}:\n{tail()}")
        if time.monotonic() > deadline:
            raise BenchError(f"the upstream wrote no port file within {timeout:g}s:\n{tail()}")
        time.sleep(0.02)
        info = BootInfo.read(port_file)
    while http_status(f"{info.url}/openapi.json") != 200:
        if popen.poll() is not None or time.monotonic() > deadline:
            raise BenchError(f"the upstream at {info.url} did not answer /openapi.json:\n{tail()}")
        time.sleep(0.02)
    return info


def _wait_http(proc: Proc, url: str, timeout: float, poll: float = 0.01) -> float:
    """Seconds until ``url`` answers 200; raises BenchError with the log tail otherwise."""
    started = time.monotonic()
    while True:
        if http_status(url) == 200:
            return time.monotonic() - started
        if not proc.alive():
            raise BenchError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log_tail()}")
        if time.monotonic() - started > timeout:
            proc.stop()
            raise BenchError(f"{proc.name} not ready at {url} within {timeout:g}s:\n{proc.log_tail()}")
        time.sleep(poll)


def start_upstream(workdir: Path, timeout: float = 240, server: str = SERVER) -> Proc:
    """A Gym resources server (nemo-gym 0.4.0; by default the counter, else ``server``, which may be
    a ``module:Class`` of this project) under ``bridge/upstream/boot.py``, serving."""
    if not GYM_PYTHON.exists():
        raise BenchError(f"the Gym environment is missing ({GYM_PYTHON}); run 'make setup'")
    port_file, started = workdir / "upstream.port.json", time.monotonic()
    options = ["--server", server, "--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file)]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    proc = _spawn("upstream", [str(GYM_PYTHON), str(BOOT), *options], workdir, env={"PYTHONPATH": path})
    try:
        info = wait_for_boot(proc.popen, port_file, proc.log, timeout)
    except BenchError:
        proc.stop()
        raise
    proc.url, proc.extra["gym_version"] = info.url, info.gym_version
    proc.extra["boot_s"] = time.monotonic() - started
    return proc


def start_bridge(
    workdir: Path,
    upstream_url: str | None,
    name: str = "bridge",
    timeout: float = 240,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    port: int | None = None,
) -> Proc:
    """``gym-mcp-bridge serve`` (``command``, default ``BRIDGE``; external mode when ``upstream_url``
    is given; on ``port``, else a free one), once ready; ``extra['ready_s']``: spawn to the first 200
    from ``/readyz``. No session drain on SIGTERM unless ``env`` sets ``shutdown_grace_s``."""
    started, port = time.monotonic(), port or free_port()
    argv = [
        *(command or BRIDGE),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    argv += ["--upstream-url", upstream_url] if upstream_url else []
    env = {"GYM_MCP_BRIDGE_SECRET": SECRET, "GYM_MCP_BRIDGE_SHUTDOWN_GRACE_S": "0", **(env or {})}
    proc = _spawn(name, argv, workdir, env=env)
    proc.url = f"http://127.0.0.1:{port}"
    _wait_http(proc, f"{proc.url}/readyz", timeout, poll=0.005)
    proc.extra["ready_s"] = time.monotonic() - started
    return proc
