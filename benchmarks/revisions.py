"""Which code a benchmark measures: the checkout's commit, and another revision's ``bridge/``
package unpacked to run beside it (``benchmarks.capacity --baseline``).

A baseline runs on the checkout's environment, started with ``python -P`` and ``PYTHONPATH`` set to
the unpacked tree, so the checkout's own ``bridge/`` is not on its import path.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from benchmarks.procs import ROOT, BenchError


def unpack_bridge(revision: str, into: Path) -> Path:
    """The ``bridge/`` package of git ``revision``, unpacked under ``into`` (its import root)."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "bridge"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        raise BenchError(f"--baseline {revision}: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def named(revision: str) -> str:
    """``revision`` with the commit it names, as ``HEAD (7db7edd)``."""
    found = _git("rev-parse", "--short", revision)
    return f"{revision} ({found})" if found else revision


def describe_checkout() -> str:
    """The checkout measured: its commit, ``-dirty`` when its files differ from it."""
    return _git("describe", "--always", "--dirty") or "unknown"


def _git(*argv: str) -> str:
    found = subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True, check=False)
    return found.stdout.strip() if found.returncode == 0 else ""
