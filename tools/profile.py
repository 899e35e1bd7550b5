"""Where one replica's CPU goes per call, down to the kernel: ``perf`` on one path of the per-call
benchmark. A diagnostic tool, not a benchmark: it answers "where", the benchmarks answer "how much".

    make profile ARGS="--path fwd --sessions 1"   # perf, and Python 3.12 in .venv-profile
    python -m tools.profile --path fwd|mcp|rest|asgi [--work 16B|64KB] [--sessions N] [--calls N]

Starts the processes of one path of ``benchmarks/calls.py`` (a bare upstream, the bridge replicas or
the ``asgi`` floor), warms the path up, then runs one workload (``--work``: 16-byte calls,
or 64 KiB arguments and answers) once while ``perf record`` samples the process under test
(``fwd``: the non-owner) with DWARF call graphs. ``perf`` unwinds
each stack from the sampled instruction up to the first Python frame it meets (the trampoline has
no unwind information), so each sample is charged to its innermost Python function: a syscall or a
C call counts where Python made it. Two exceptions: a sample whose innermost Python frame is
``asyncio.runners`` ran in uvloop's own loop, outside any callback; one inside CPython's cyclic
garbage collector is the collector's, not the function it interrupted. The report sums the samples
by module (``bridge.*`` and ``benchmarks.*`` one by one, the rest by package), says how many ran in
the kernel (socket writes and reads, TCP, epoll, page faults), and turns each share into
milliseconds per call with the process's CPU per call in the same run. The functions holding the
most samples follow (``--top``).

Python frames are visible to ``perf`` only from CPython 3.12 on, through its perf trampoline
(``PYTHONPERFSUPPORT=1``, set here for every process started). So this runs on a 3.12+ interpreter
with the project's dependencies, and needs ``perf`` (Debian: ``linux-perf``) and permission to
profile another process (root, or ``kernel.perf_event_paranoid`` <= 1). The trampoline and the
sampling slow Python calls, so the absolute figures run higher than ``make bench ARGS=calls``'s;
the shares are what this is for. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import uvloop

from benchmarks import procs
from benchmarks.calls import SIZES, UNDER_TEST, Bench
from benchmarks.procs import BenchError

PATHS = ("fwd", "mcp", "rest", "asgi")
LOOP = "event loop (uvloop)"
GC = "garbage collector"
# CPython 3.12's cyclic collector (its eval-breaker check and the collection): a sample in it is
# the collector's, whichever function it interrupted
_COLLECTOR = frozenset({"gc_collect_main", "_Py_RunGC"})


@dataclass
class Share:
    where: str
    samples: int
    kernel: int  # of those, samples whose innermost frame is the kernel's


def samples(perf_script: Iterable[str]) -> Iterator[list[tuple[bool, str]]]:
    """The call stacks in ``perf script -F comm,ip,sym`` text, innermost frame first: (is a kernel
    address, symbol) per frame."""
    stack: list[tuple[bool, str]] = []
    for line in perf_script:
        if line.startswith("\t"):
            ip, _, symbol = line.strip().partition(" ")
            stack.append((ip.startswith("ffff"), symbol.strip()))
        elif stack:
            yield stack
            stack = []
    if stack:
        yield stack


def where(symbol: str, root: Path = procs.ROOT) -> str:
    """The module that a perf-trampoline symbol (``py::Qualname:/path/to/file.py``) belongs to:
    ``bridge.*`` and ``benchmarks.*`` by module, ``asyncio.runners`` as the loop, other code by its
    top-level package (site-packages) or standard-library module."""
    path = Path(symbol.removeprefix("py::").partition(":")[2])
    if path.name == "runners.py" and path.parent.name == "asyncio":
        return LOOP
    parts = path.parts
    if "site-packages" in parts:  # first: an environment may live inside the checkout
        return parts[parts.index("site-packages") + 1]
    if path.is_relative_to(root):
        return ".".join(path.relative_to(root).with_suffix("").parts)
    return path.parent.name if path.parent.name == "asyncio" else path.stem


def function(symbol: str, root: Path = procs.ROOT) -> str:
    """``module:Qualname`` of a perf-trampoline symbol (the module as ``where`` names it)."""
    return f"{where(symbol, root)}:{symbol.removeprefix('py::').partition(':')[0]}"


def breakdown(
    stacks: Iterable[list[tuple[bool, str]]],
    root: Path = procs.ROOT,
    name: Callable[[str, Path], str] = where,
) -> list[Share]:
    """Samples per module (or per ``name``) of their innermost Python frame, most first; a sample
    in the cyclic garbage collector counts as ``GC``, and one perf could not unwind up to a Python
    frame as ``(no Python frame)``."""
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for stack in stacks:
        native = list(itertools.takewhile(lambda frame: not frame[1].startswith("py::"), stack))
        inner = stack[len(native)][1] if len(native) < len(stack) else None
        if any(symbol in _COLLECTOR for _, symbol in native):
            key = GC
        else:
            key = name(inner, root) if inner else "(no Python frame)"
        entry = counts[key]
        entry[0] += 1
        entry[1] += stack[0][0]
    shares = [Share(key, n, k) for key, (n, k) in counts.items()]
    return sorted(shares, key=lambda s: -s.samples)


def render(shares: list[Share], cpu_ms_per_call: float, what: str = "module", top: int | None = None) -> str:
    """The table: each entry's share of the samples, that share of ``cpu_ms_per_call``, and how much of
    it ran in the kernel; the ``top`` entries only, when given, and the kernel's total after all."""
    total = sum(s.samples for s in shares) or 1
    lines = [f"share  ms/call  in kernel  {what} of the innermost Python frame", "-" * 72]
    for s in shares[:top]:
        share = s.samples / total
        lines.append(
            f"{share:6.1%}  {share * cpu_ms_per_call:7.4f}  {s.kernel / max(s.samples, 1):9.0%}  {s.where}"
        )
    if top is None:
        kernel = sum(s.kernel for s in shares) / total
        lines.append(f"in the kernel, all modules: {kernel:.1%} ({kernel * cpu_ms_per_call:.4f} ms/call)")
    return "\n".join(lines)


async def profile(args: argparse.Namespace, workdir: Path) -> int:
    bench = Bench(workdir, lambda text: print(text, file=sys.stderr, flush=True))
    recorder: subprocess.Popen[bytes] | None = None
    try:
        bench.start([args.path])
        process = UNDER_TEST[args.path]
        target = bench.procs[process]
        calls = max(20, args.calls // args.sessions)
        await bench.run(
            args.work, args.path, args.sessions, calls // 4 + 1, -1
        )  # warm-up, as the benchmark's
        data = workdir / "perf.data"
        record = ["perf", "record", "-q", "-F", str(args.hz), "--call-graph", "dwarf,32768"]
        recorder = subprocess.Popen(
            [*record, "-p", str(target.pid), "-o", str(data)], stdout=subprocess.DEVNULL
        )
        await asyncio.sleep(1.0)  # perf attached
        run = await bench.run(args.work, args.path, args.sessions, calls, 0)
        recorder.send_signal(signal.SIGINT)
        if recorder.wait(60) not in (0, -signal.SIGINT) or not data.exists():
            raise BenchError(f"perf record exited with {recorder.returncode}")
        script = subprocess.run(
            ["perf", "script", "-i", str(data), "-F", "comm,ip,sym"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    finally:
        if recorder is not None and recorder.poll() is None:  # the run failed under it
            recorder.kill()
        bench.stop()
    stacks = list(samples(script.stdout.splitlines()))
    shares = breakdown(stacks)
    cpu = run.cpu_ms_per_call[process]
    perf_version = subprocess.run(["perf", "version"], capture_output=True, text=True).stdout.strip()
    print(
        f"profile: {args.path}, {args.work}, {args.sessions} session(s), {run.calls} calls at {run.calls_per_s:.0f}/s; "
        f"{process} (pid {target.pid}) {cpu:.3f} ms CPU per call under perf; Python {sys.version.split()[0]}, "
        f"{perf_version}, {args.hz} Hz, {sum(s.samples for s in shares)} samples"
    )
    print(render(shares, cpu))
    print()
    print(render(breakdown(stacks, name=function), cpu, "function", args.top))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m tools.profile", description=__doc__.split("\n")[0])
    p.add_argument("--path", choices=PATHS, default="fwd")
    p.add_argument(
        "--work", choices=tuple(SIZES), default="16B", help="16-byte calls or 64 KiB arguments and answers"
    )
    p.add_argument("--sessions", type=int, default=1)
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--hz", type=int, default=499)
    p.add_argument("--top", type=int, default=15, help="functions listed after the modules")
    args = p.parse_args()
    if sys.version_info < (3, 12):
        p.error(
            f"needs Python 3.12+ (perf sees Python frames through its trampoline); this is {sys.version.split()[0]}"
        )
    if shutil.which("perf") is None or shutil.which("taskset") is None:
        p.error("needs perf (Debian: linux-perf) and taskset (util-linux)")
    os.environ["PYTHONPERFSUPPORT"] = "1"  # every process started from here on
    with tempfile.TemporaryDirectory(prefix="gym-mcp-profile-") as tmp:
        try:
            return uvloop.run(profile(args, Path(tmp)))
        except BenchError as exc:
            print(f"tools.profile: FAILED: {exc}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
