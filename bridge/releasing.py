"""What follows a session's end: the session gauges and counters, and releasing on the upstream
(Gym >= 0.7's ``/close_session``) the sessions the bridge ends by itself.

Gym's collector and nearly all its agents never call ``/close_session``; a resources server that
keeps per-rollout state frees it there. When the bridge ends a session itself (it expired, or it
finished and was released under the state budget), ``Releaser.submit`` queues it and a few workers
post ``/close_session`` to the upstream with the session's cookie and Gym's typed body (the row's
``resources_session_id`` and ``episode_id``; a session seeded with a plain row is named by its
bridge id, and the upstream finds its state by the cookie). ``settle`` (called by the service after
each change of the registry) updates the metrics and queues what the registry ended. The queue is
bounded: past ``QUEUE_MAX`` a release is dropped and counted, never waited for. Outcomes are
counted in ``gym_mcp_bridge_upstream_closes_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from bridge import exactjson
from bridge.metrics import Metrics
from bridge.sessions import Session, SessionRegistry
from bridge.upstream import Upstream, UpstreamRequestRefused, UpstreamTimeout, UpstreamUnavailable
from bridge.upstream.cookies import request_headers

log = logging.getLogger("gym_mcp_bridge")

QUEUE_MAX = 100_000
WORKERS = 4
TIMEOUT_S = 30.0


def close_body(session: Session) -> bytes:
    """Gym's ``ResourcesCloseSessionRequest`` for a session: its typed seed's ids, else its own id
    (an ``EpisodeId`` is ``{"rollout_id", "attempt"}``)."""
    row: dict[str, Any] = session.row
    resources_id = row.get("resources_session_id")
    episode_id = row.get("episode_id")
    return exactjson.dumps(
        {
            "resources_session_id": resources_id if isinstance(resources_id, str) else session.sid,
            "episode_id": episode_id
            if isinstance(episode_id, dict)
            else {"rollout_id": session.sid, "attempt": 0},
        }
    )


class Releaser:
    """Posts ``/close_session`` for ended sessions, in the background, a few at a time."""

    def __init__(self, sessions: SessionRegistry, upstream: Upstream, metrics: Metrics) -> None:
        self.sessions = sessions
        self.upstream = upstream
        self.metrics = metrics
        self.queue: asyncio.Queue[tuple[str, bytes, str]] = asyncio.Queue(QUEUE_MAX)
        self.counted = dict(sessions.ended)  # ended sessions already counted, by why
        metrics.state_budget_bytes.set(sessions.budget_bytes)

    def settle(self, close_path: Callable[[Session], str | None]) -> None:
        """Gauges and counters from the registry; each session it ended by itself (expired, released
        under the budget) is queued for ``/close_session`` at ``close_path(session)`` (None: the
        upstream has no such route)."""
        sessions, metrics = self.sessions, self.metrics
        metrics.sessions_active.set(len(sessions))
        metrics.sessions_finished.set(sessions.finished)
        metrics.state_bytes.set(sessions.state_bytes)
        for kind, count in sessions.ended.items():
            if count != self.counted[kind]:
                metrics.sessions_ended.labels(kind).inc(count - self.counted[kind])
                self.counted[kind] = count
        for session in sessions.take_released():
            path = close_path(session)
            if path is not None:
                self.submit(session, path)

    def submit(self, session: Session, path: str) -> None:
        """Queue the release of ``session`` at ``path`` (its ``/ng-rollout/<id>/`` prefix included)."""
        try:
            self.queue.put_nowait((path, close_body(session), session.cookie))
        except asyncio.QueueFull:
            self.metrics.upstream_closes.labels("dropped").inc()

    async def run(self) -> None:
        """Release queued sessions until cancelled."""
        workers = [asyncio.create_task(self._work()) for _ in range(WORKERS)]
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()

    async def _work(self) -> None:
        while True:
            path, body, cookie = await self.queue.get()
            outcome = "failed"
            with contextlib.suppress(UpstreamTimeout, UpstreamUnavailable, UpstreamRequestRefused):
                response = await self.upstream.post(path, body, request_headers(cookie), timeout=TIMEOUT_S)
                outcome = "closed" if response.is_success else f"http_{response.status_code // 100}xx"
                if not response.is_success:
                    log.debug(
                        "upstream /close_session answered %s: %s", response.status_code, response.text[:200]
                    )
            self.metrics.upstream_closes.labels(outcome).inc()
