"""The optional audit log: one JSON line per tool call served (``--audit-log FILE``).

Each line: ``time`` (UTC, ISO 8601), ``session`` (a hash of the session id, as in traces),
``tool`` (canonical), ``emitted`` (as the harness called it), ``transport``, ``outcome``,
``latency_ms``, ``rollout_id`` (Gym's ``/ng-rollout/<id>/`` of the session, when it had one, as
``bridge.rollouts.label`` bounds it: whole up to 128 characters);
``arguments`` only with ``--audit-log-arguments`` (they may hold what a model
read from the task). Never results or tokens. ``service.Bridge`` writes a line (``_finish``) after the
call; the file is appended to, line-buffered, so a crash loses at most the line being written.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import IO, Any

from bridge import exactjson


class AuditLog:
    def __init__(self, path: Path, arguments: bool) -> None:
        self.path = path
        self.arguments = arguments
        self._file: IO[bytes] = path.open("ab", buffering=0)

    def record(
        self,
        session: str,
        tool: str,
        emitted: str,
        transport: str,
        outcome: str,
        seconds: float,
        arguments: Any,
        rollout_id: str | None = None,
    ) -> None:
        line: dict[str, Any] = {
            "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            "session": session,
            "tool": tool,
            "emitted": emitted,
            "transport": transport,
            "outcome": outcome,
            "latency_ms": round(seconds * 1000, 3),
        }
        if rollout_id is not None:
            line["rollout_id"] = rollout_id
        if self.arguments:
            line["arguments"] = arguments
        self._file.write(exactjson.dumps(line, default=str) + b"\n")

    def close(self) -> None:
        self._file.close()
