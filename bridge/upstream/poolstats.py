"""What a bounded connection pool reports (``transport.KeepAlivePool.stats``): its connections in
use and idle, the requests queued for one, its bound, and how many requests waited for a connection
and how long, counted by ``WAIT_BUCKETS``. ``/healthz`` shows ``PoolStats.as_dict``; ``/metrics``
reads the same dict (``bridge.metrics``: the ``gym_mcp_bridge_connection_wait_seconds`` histogram).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

# Upper bounds (seconds) of the wait-for-a-connection histogram; a last, unbounded bucket follows.
WAIT_BUCKETS = (0.001, 0.01, 0.1, 1.0, 5.0, 30.0, 120.0, 600.0)


class Waits:
    """The requests that waited for a connection of one pool: a count per ``WAIT_BUCKETS`` bucket
    (not cumulative; the last is past the last bound) and the seconds waited in all."""

    def __init__(self) -> None:
        self.counts = [0] * (len(WAIT_BUCKETS) + 1)
        self.seconds = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(WAIT_BUCKETS, seconds)] += 1
        self.seconds += seconds

    def figures(self) -> tuple[tuple[int, ...], float]:
        return tuple(self.counts), self.seconds


@dataclass(frozen=True, slots=True)
class PoolStats:
    """Connections of one pool (or a sum of pools): in use, idle, requests waiting, the bound; and
    the requests that waited so far, by ``WAIT_BUCKETS`` (as ``Waits`` counts them), and the seconds
    they waited in all."""

    busy: int = 0
    idle: int = 0
    queued: int = 0
    limit: int = 0
    waits: tuple[int, ...] = (0,) * (len(WAIT_BUCKETS) + 1)
    wait_seconds: float = 0.0

    def __add__(self, other: PoolStats) -> PoolStats:
        return PoolStats(
            self.busy + other.busy,
            self.idle + other.idle,
            self.queued + other.queued,
            self.limit + other.limit,
            tuple(a + b for a, b in zip(self.waits, other.waits, strict=True)),
            self.wait_seconds + other.wait_seconds,
        )

    def as_dict(self) -> dict[str, Any]:
        """The figures ``/healthz`` shows (and ``/metrics`` reads, ``wait_counts`` included)."""
        return {
            "busy": self.busy,
            "idle": self.idle,
            "queued": self.queued,
            "limit": self.limit,
            "waited": sum(self.waits),
            "wait_seconds": round(self.wait_seconds, 3),
            "wait_counts": list(self.waits),
        }
