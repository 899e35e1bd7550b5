"""A log line about a repeated event, at most one per interval, with the count since the last one.

The bridge logs every connection it cannot take and every request the upstream fails, but under a
burst (thousands of requests at an exhausted descriptor limit) one line per event would drown the
log. ``Throttle.tick`` counts an event and returns how many happened since the last line when one
may be written now, else None. This module imports nothing of ``bridge/``.
"""

from __future__ import annotations

import time


class Throttle:
    __slots__ = ("_last", "count", "every_s")

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self.count = 0  # events since the last line
        self._last = float("-inf")

    def tick(self) -> int | None:
        """Count one event; the events since the last line (this one included) when a line is due."""
        self.count += 1
        now = time.monotonic()
        if now - self._last < self.every_s:
            return None
        count, self.count, self._last = self.count, 0, now
        return count
