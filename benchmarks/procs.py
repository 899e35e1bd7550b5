"""Processes under test: the Gym upstream, the bridge, Gym 0.7's in-process MCP server and a generic
OpenAPI->MCP proxy; the side environments the last two need; CPU and memory read from /proc."""

from __future__ import annotations

import contextlib
import json
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
CACHE = ROOT / ".cache" / "bench"
GYM_PYTHON = ROOT / ".gym-env" / "bin" / "python"
BOOT = ROOT / "bridge" / "upstream" / "boot.py"
BRIDGE = [sys.executable, "-m", "bridge"]
SECRET = "bench-secret-0123456789abcdef0123456789abcdef"
SERVER = "example_session_state_mgmt"
GYM07_ENV = ROOT / ".gym-env-0.7.0"  # make gym-env NEMO_GYM_VERSION=0.7.0
FASTMCP_ENV = CACHE / "fastmcp-env"
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
    """The port a benchmark instrument (``bare_upstream``, ``relay``) listens on: its first output
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


def start_relay(workdir: Path, target_url: str, mode: str = "bytes", timeout: float = 60) -> Proc:
    """``benchmarks/relay.py`` in front of ``target_url``, the benchmarks' controls: ``bytes``
    (process ``relay``) copies bytes, ``splice`` (process ``splice``) relays parsed requests below
    ASGI, ``forward`` (process ``fwd-splice``, in front of a bridge) does so past a non-owner's
    checks, ``asgi`` (process ``asgi``) is the bridge's HTTP stack with no MCP work."""
    name = {"bytes": "relay", "forward": "fwd-splice"}.get(mode, mode)
    target = target_url.removeprefix("http://")
    argv = [sys.executable, "-m", "benchmarks.relay", "--target", target, "--mode", mode]
    proc = _spawn(name, argv, workdir, env={"GYM_MCP_BRIDGE_SECRET": SECRET})
    proc.url = f"http://127.0.0.1:{port_line(proc, timeout)}"
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


def _serving(proc: Proc, port_file: Path, timeout: float) -> None:
    """Wait for a Gym boot script to serve (``wait_for_boot``); record its URL and Gym version."""
    try:
        info = wait_for_boot(proc.popen, port_file, proc.log, timeout)
    except BenchError:
        proc.stop()
        raise
    proc.url = info.url
    proc.extra["gym_version"] = info.gym_version


def _upstream_argv(port: int, port_file: Path) -> list[str]:
    """The Gym counter server under ``upstream/boot.py`` on ``port`` (0: any free port)."""
    if not GYM_PYTHON.exists():
        raise BenchError(f"the Gym environment is missing ({GYM_PYTHON}); run 'make setup'")
    options = {"--server": SERVER, "--host": "127.0.0.1", "--port": str(port), "--port-file": str(port_file)}
    return [str(GYM_PYTHON), str(BOOT), *(part for option in options.items() for part in option)]


def start_upstream(workdir: Path, timeout: float = 240) -> Proc:
    port_file = workdir / "upstream.port.json"
    started = time.monotonic()
    proc = _spawn("upstream", _upstream_argv(0, port_file), workdir)
    _serving(proc, port_file, timeout)
    proc.extra["boot_s"] = time.monotonic() - started
    return proc


def spawn_bridge(
    workdir: Path, upstream_url: str | None, name: str = "bridge", env: dict[str, str] | None = None
) -> Proc:
    """``gym-mcp-bridge serve`` (external mode when ``upstream_url`` is given), not waited for."""
    port = free_port()
    argv = [*BRIDGE, "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    if upstream_url:
        argv += ["--upstream-url", upstream_url]
    proc = _spawn(name, argv, workdir, env={"GYM_MCP_BRIDGE_SECRET": SECRET, **(env or {})})
    proc.url = f"http://127.0.0.1:{port}"
    return proc


def start_bridge(
    workdir: Path,
    upstream_url: str | None,
    name: str = "bridge",
    timeout: float = 240,
    env: dict[str, str] | None = None,
) -> Proc:
    """``spawn_bridge``, then wait; ``extra['ready_s']`` is the time from spawn to the first 200 from
    /readyz."""
    started = time.monotonic()
    proc = spawn_bridge(workdir, upstream_url, name, env)
    _wait_http(proc, f"{proc.url}/readyz", timeout, poll=0.005)
    proc.extra["ready_s"] = time.monotonic() - started
    return proc


def start_together(workdir: Path, name: str, timeout: float = 240) -> tuple[float, float]:
    """The upstream and the bridge (external mode) spawned at the same moment, as ``compose up`` and
    the Kubernetes pod start them. Returns the seconds from spawn until the upstream first answers
    /openapi.json and until the bridge's /readyz first answers 200."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = _upstream_argv(port, workdir / f"{name}.port.json")
    started = time.monotonic()
    upstream = _spawn(f"{name}-upstream", argv, workdir)
    bridge = spawn_bridge(workdir, url, f"{name}-bridge")
    upstream_s: float | None = None
    bridge_s: float | None = None
    try:
        while upstream_s is None or bridge_s is None:
            for proc in (upstream, bridge):
                if not proc.alive():
                    raise BenchError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log_tail()}")
            now = time.monotonic() - started
            if now > timeout:
                raise BenchError(f"{name}: not ready within {timeout:g}s:\n{bridge.log_tail()}")
            if upstream_s is None and http_status(f"{url}/openapi.json", timeout=0.5) == 200:
                upstream_s = time.monotonic() - started
            if bridge_s is None and http_status(f"{bridge.url}/readyz", timeout=0.5) == 200:
                bridge_s = time.monotonic() - started
            time.sleep(0.005)
    finally:
        bridge.stop()
        upstream.stop()
    return upstream_s, bridge_s


def start_gym07(workdir: Path, timeout: float = 240) -> Proc:
    port_file = workdir / "gym07.port.json"
    proc = _spawn(
        "gym07",
        [
            str(GYM07_ENV / "bin" / "python"),
            str(ROOT / "benchmarks" / "gym07_boot.py"),
            "--port-file",
            str(port_file),
        ],
        workdir,
    )
    _serving(proc, port_file, timeout)
    return proc


def start_fastmcp(workdir: Path, upstream_url: str, timeout: float = 120) -> Proc:
    port_file = workdir / "fastmcp.port.json"
    proc = _spawn(
        "fastmcp",
        [
            str(FASTMCP_ENV / "bin" / "python"),
            str(ROOT / "benchmarks" / "fastmcp_proxy.py"),
            "--upstream",
            upstream_url,
            "--port-file",
            str(port_file),
        ],
        workdir,
    )
    deadline = time.monotonic() + timeout
    while not port_file.exists():  # the proxy writes {"host", "port"} once it bound
        if not proc.alive() or time.monotonic() > deadline:
            proc.stop()
            raise BenchError(f"fastmcp wrote no port file within {timeout:g}s:\n{proc.log_tail()}")
        time.sleep(0.02)
    info = json.loads(port_file.read_text())
    proc.url = f"http://{info['host']}:{info['port']}"
    return proc


# -- side environments (built by the benchmark itself, cached under .cache/bench) -------------------


def gym_version(python: Path) -> str:
    """The nemo-gym version installed for ``python`` ("" when it has none)."""
    return subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('nemo-gym'))"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def _find_python(minor: str) -> str | None:
    try:
        out = subprocess.run(
            [str(ROOT / "scripts" / "find-python.sh"), minor], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def _uv() -> str:
    local = ROOT / ".cache" / "uv-venv" / "bin" / "uv"
    return str(local) if local.exists() else "uv"


def _run(argv: list[str], log: Path) -> None:
    with log.open("ab") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=900)


def _imports(python: Path, code: str) -> bool:
    if not python.exists():
        return False
    return subprocess.run([str(python), "-c", code], capture_output=True, timeout=300).returncode == 0


GYM07_CHECK = "import nemo_gym.mcp_auto_exposure, resources_servers.example_session_state_mgmt.app"


def ensure_gym07_env(log: Path) -> str | None:
    """Build ``.gym-env-0.7.0`` with the project's one builder (``make gym-env NEMO_GYM_VERSION=0.7.0``:
    ``scripts/setup-gym-env.sh``, stamp-cached; it states the Python >= 3.13.14 question and installs
    on this machine's 3.13.0 as if it were 3.13.14). Returns None when ready, else why the column is
    skipped."""
    python = GYM07_ENV / "bin" / "python"
    env = {**os.environ, "UV": _uv(), "NEMO_GYM_VERSION": "0.7.0"}
    try:
        with log.open("ab") as out:
            subprocess.run(
                [str(ROOT / "scripts" / "setup-gym-env.sh"), str(GYM07_ENV)],
                stdout=out, stderr=subprocess.STDOUT, env=env, check=True, timeout=900,
            )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not build the nemo-gym 0.7.0 environment ({exc}); see {log}"
    if not _imports(python, GYM07_CHECK):
        return f"nemo-gym 0.7.0 does not import in {GYM07_ENV}; see {log}"
    return None


def ensure_fastmcp_env(log: Path) -> str | None:
    python = FASTMCP_ENV / "bin" / "python"
    if _imports(python, "import fastmcp"):
        return None
    base = _find_python("3.12") or _find_python("3.11")
    if base is None:
        return "no Python 3.11/3.12 interpreter for the FastMCP environment"
    try:
        _run([_uv(), "venv", "-q", "--clear", "--python", base, str(FASTMCP_ENV)], log)
        _run([_uv(), "pip", "install", "-q", "--python", str(python), "fastmcp", "httpx"], log)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not build the FastMCP environment ({exc}); see {log}"
    return None if _imports(python, "import fastmcp") else f"fastmcp does not import; see {log}"
