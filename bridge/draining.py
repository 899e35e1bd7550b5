"""A replica's drain: after SIGTERM it takes no new session and keeps serving the ones it holds
until each is finished (verified or closed) or the shutdown grace period ends.

``Drain.begin`` starts it (``/readyz`` 503 and seeds 503 + ``Retry-After`` from then on, both with
``reason``); ``Drain.wait`` returns once no session is unfinished and no seed is in flight
(``seeding``: a seed the upstream is still answering becomes a session to wait for), or at the
deadline with the sessions still unfinished, which the caller names in the log and counts. Peers
keep forwarding the sessions this replica owns meanwhile: it keeps its port open until the wait
ends. Whoever holds the ``Drain`` (``bridge.service.Bridge``) checks ``active`` before a seed. Once
the process stops (``stopped``), a request still waiting for the upstream is answered with
``stopped_reason``, its session's loss, instead of being dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from bridge import rollouts

if TYPE_CHECKING:  # serving.py imports this module before the heavy ones (the first /healthz)
    from bridge.sessions import Session

POLL_S = 0.1
RETRY_AFTER_S = 2  # a seed refused while draining: another replica takes it


class Drain:
    """The drain's state: since when, until when, and the seeds still being answered."""

    def __init__(self) -> None:
        self.since: float | None = None  # monotonic time of the SIGTERM
        self.deadline = 0.0
        self.grace_s = 0.0
        self.seeding = 0  # seeds the upstream is answering now
        self.stopped = False  # the process is stopping: a request cut now loses its session

    @property
    def active(self) -> bool:
        return self.since is not None

    def begin(self, grace_s: float) -> None:
        if self.since is None:
            self.since = time.monotonic()
            self.grace_s = grace_s
            self.deadline = self.since + grace_s

    def reason(self, unfinished: int) -> str:
        """Why this replica is not ready: one line for ``/readyz`` and a refused seed."""
        left = max(0.0, self.deadline - time.monotonic())
        return (
            f"draining: this replica received SIGTERM and takes no new sessions; it serves the {unfinished} "
            f"unfinished sessions it holds until they finish (at most {left:.0f}s more of its "
            f"shutdown_grace_s={self.grace_s:g}), then exits; seed on another replica"
        )

    def stopped_reason(self) -> str:
        """The refusal of a call or ``/verify`` still running when the process stops (the grace
        period over, SIGINT, or a second signal): uvicorn cancels it, and its session is lost."""
        return (
            "this replica stopped while the request was running (its shutdown grace period ended, or "
            "SIGINT or a second signal stopped it at once): the upstream may still have applied it, and "
            "this session is lost"
        )

    async def wait(self, unfinished: Callable[[], list[Session]]) -> list[Session]:
        """Wait until nothing is unfinished or the deadline passes; the sessions left unfinished."""
        while True:
            left = unfinished()
            if (not left and not self.seeding) or time.monotonic() >= self.deadline:
                return left
            await asyncio.sleep(POLL_S)


def named(sessions: list[Session], shown: int = 20) -> str:
    """The sessions a drain left unfinished, for the log: id, rollout id, calls served."""

    def one(session: Session) -> str:
        rollout = f"rollout {rollouts.label(session.rollout_id)}, " if session.rollout_id else ""
        return f"{session.sid} ({rollout}{session.calls_served} calls served)"

    more = len(sessions) - shown
    return ", ".join(one(s) for s in sessions[:shown]) + (f", and {more} more" if more > 0 else "")
