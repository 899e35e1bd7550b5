"""``make bench ARGS="<question> ..."``: the one runner of the benchmarks, one benchmark per question.

    calls       per-call cost and capacity: the bridge's CPU per call and calls/s per core, REST and
                MCP, against nginx and the bridge's HTTP stack alone (benchmarks/calls.py)
    forwarding  a call through a replica that does not own the session against the same call to the
                owner (benchmarks/forwarding.py)
    footprint   restart to ready against its floors, the imports, idle sessions' memory
                (benchmarks/footprint.py)
    soak        a training run: never-closed rollouts for up to an hour, every reward checked
                (benchmarks/soak.py)
    inflight    256 to 4,096 rollouts in flight on two replicas against Gym alone (benchmarks/soak.py)
    collector   Gym's own launcher and collector at scale through the bridge, every reward compared
                with Gym's in-process MCP (benchmarks/collector.py)
    rolling     every replica restarted in turn while rollouts with model time run, against the same
                run with no restart (benchmarks/rolling.py)
    long-tools  a step of long tool calls (1 s to 120 s, heavy-tailed) released together on two
                replicas and on one, against Gym alone (benchmarks/long_tools.py)

Each question takes ``--help``; each prints its table and writes its JSON (by default
``benchmarks/results/<question>.json``, the files docs/performance.md cites). Tables, intervals and
plots: ``benchmarks/report.py``. Every benchmark checks its answers and exits 1 on a wrong one.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

QUESTIONS = {
    "calls": ("benchmarks.calls", False),
    "forwarding": ("benchmarks.forwarding", False),
    "footprint": ("benchmarks.footprint", False),
    "soak": ("benchmarks.soak", True),  # True: the module is told its question (soak.py answers two)
    "inflight": ("benchmarks.soak", True),
    "collector": ("benchmarks.collector", False),
    "rolling": ("benchmarks.rolling", False),
    "long-tools": ("benchmarks.long_tools", False),
}


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if not given or given[0] not in QUESTIONS:
        print(__doc__, file=sys.stderr)
        return 0 if given[:1] in (["-h"], ["--help"]) else 2
    name, told = QUESTIONS[given[0]]
    entry: Callable[[list[str]], int] = importlib.import_module(name).main
    return entry(given if told else given[1:])


if __name__ == "__main__":
    sys.exit(main())
