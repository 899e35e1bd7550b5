"""The process's open-file limit: raised to its ceiling once at start, and the budget the bridge
derives from it.

Every connection is a file descriptor: a client's connection to the bridge, the bridge's to its
upstream and to each owner replica it forwards to, and on the owner the forwarded one again. The
common default soft ``RLIMIT_NOFILE`` of 1,024 runs out at a few hundred rollouts in flight, so
``raise_open_files`` raises the soft limit to the hard one (which an unprivileged process may do)
once per process, in ``serve`` before anything is opened or spawned; the managed upstream inherits
the raised limit. It returns one line for the log saying what it did.

``connection_budget`` turns the limit into the number of client connections the bridge keeps open
at once (``bridge.http.accept``): the limit less a reserve for everything else the process holds
(its outbound pools at their bounds, logs, pipes, the event loop's own descriptors). This module
imports nothing of ``bridge/``.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

RESERVE = 64  # descriptors besides connections: logs, pipes, the loop's own, probes, a spare
PEERS_RESERVED = 4  # owner replicas whose forwarding pools the budget keeps room for at their bound
NR_OPEN = Path("/proc/sys/fs/nr_open")  # Linux: the ceiling of an unlimited hard limit


@dataclass(frozen=True, slots=True)
class OpenFiles:
    """The soft limit before and after ``raise_open_files``, the hard limit, the log line, and whether
    raising it failed."""

    before: int
    soft: int
    hard: int
    message: str
    failed: bool = False


def _ceiling(hard: int) -> int:
    if hard != resource.RLIM_INFINITY:
        return hard
    try:
        return int(NR_OPEN.read_text())
    except (OSError, ValueError):
        return 1_048_576


def raise_open_files() -> OpenFiles:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (never lower it); say what happened."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _ceiling(hard)
    shown_hard = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            return OpenFiles(
                soft,
                soft,
                hard,
                f"open files: could not raise the soft limit {soft} to the hard limit {shown_hard} ({exc}); "
                "raise it before starting (docker run --ulimit nofile=N:N, compose ulimits, ulimit -n)",
                failed=True,
            )
        return OpenFiles(
            soft,
            target,
            hard,
            f"open files: soft limit raised from {soft} to {target} (hard limit {shown_hard})",
        )
    current = target if soft == resource.RLIM_INFINITY else soft
    return OpenFiles(
        soft, current, hard, f"open files: soft limit {current} (hard limit {shown_hard}), not raised"
    )


def connection_budget(open_files: int, upstream_connections: int, peer_connections: int) -> int:
    """Client connections to keep open at once under ``open_files``: what the outbound pools at their
    bounds (the upstream's, and ``PEERS_RESERVED`` owners') and ``RESERVE`` leave, at least 16."""
    return max(16, open_files - RESERVE - upstream_connections - PEERS_RESERVED * peer_connections)
