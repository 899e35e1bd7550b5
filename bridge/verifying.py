"""A verify's two ends in the service: the body made ready for the upstream's ``/verify``, and the
upstream's answer made the caller's.

``Bridge.verify`` runs the way between: it waits for the session's calls still running, checks the
upstream has a ``/verify``, calls ``prepared`` (``scoring.verify.prepare`` over the session's view:
its row and its log, canonical names; a refusal becomes ``Rejected``), forwards the result to the
upstream, marks the session finished, and hands the upstream's answer to ``answered``: relayed as it
came when it is no JSON object, else with the caller's names restored, the ``_bridge`` report and,
for a session, the signed provenance of the calls it scored (``scoring.provenance.attest``). The
reward is the upstream's; nothing here computes or changes it. Each verify is counted by outcome
(``Metrics.verify_outcomes``) and each naming convention undone (``Metrics.normalizations``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from bridge import rollouts, tracing
from bridge.admission import Rejected
from bridge.metrics import Metrics
from bridge.outcomes import VerifyOutcome
from bridge.scoring import provenance, trajectory
from bridge.scoring import verify as verify_mod
from bridge.sessions import Session
from bridge.upstream import UpstreamResponse

log = logging.getLogger("gym_mcp_bridge")


def prepared(
    body: dict[str, Any],
    session: Session | None,
    aliases: Collection[str],
    upstream_tools: Collection[str],
    places: Collection[str],
    metrics: Metrics,
) -> verify_mod.Prepared:
    """``body`` ready for the upstream's ``/verify`` (``scoring.verify.prepare``, with the session's
    view when there is a session); ``Rejected`` when it cannot be."""
    view = None
    if session is not None:
        view = verify_mod.SessionView(
            session.row,
            session.calls,
            session.calls_served,
            session.tool_names,
            session.incomplete_reason(),
        )
    try:
        ready = verify_mod.prepare(body, view, aliases, upstream_tools, places)
    except verify_mod.VerifyRefused as exc:
        raise Rejected(str(exc), exc.kind) from exc
    for convention in ready.names.conventions:
        metrics.normalizations.labels(convention).inc()
    return ready


def answered(
    answer: UpstreamResponse,
    ready: verify_mod.Prepared,
    session: Session | None,
    asked: str | None,
    key: str,
    metrics: Metrics,
) -> VerifyOutcome:
    """The caller's answer to a verify the upstream answered (``answer``): as it came when it is no
    JSON object, else ``ready`` finished by ``scoring.verify.finish`` with, for a session, the signed
    provenance of the calls scored (``key``: the first signing key). ``asked``: the verify's own
    ``/ng-rollout/<id>/``, reported (signed) when it is not the seed's."""
    try:
        payload = answer.json() if answer.is_success else None
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        metrics.verify_outcomes.labels("upstream_error" if not answer.is_success else "passthrough").inc()
        return VerifyOutcome(answer, None, None)
    signed = None
    if session is not None:
        scored = provenance.scored_calls(trajectory.function_calls(ready.response))
        other = asked if asked is not None and asked != session.rollout_id else None
        if other is not None:  # reported (signed), never a reason to change the reward
            hashed, shown = tracing.session_hash(session.sid), rollouts.label(other)
            log.info("verify of session %s under another rollout id than its seed's: %r", hashed, shown)
        signed = provenance.attest(session.sid, scored, session.calls, key, session.rollout_id, other)
    payload, header = verify_mod.finish(ready, payload, signed)
    metrics.verify_outcomes.labels("never_ran" if ready.never_ran else "scored").inc()
    return VerifyOutcome(answer, payload, header)
