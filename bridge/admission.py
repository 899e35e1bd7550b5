"""Who may call: a session token verified into its claims, the claims admitted to their session,
and the refusals raised on the way, before anything reaches the upstream.

``verify_token`` checks the token (``tokens.TokenSigner.verify``: size, HS256, signature, expiry,
audience, issuer) and returns its claims; another replica's token becomes ``Foreign(owner)`` when
the owner is a peer (the HTTP layer relays the request there), else a refusal naming it.
``admit`` turns verified claims into their live session and checks the tool against the token's
allow-list. ``Bridge.authorize`` is the two in a row; a surface that verified once (``/mcp``)
passes the claims on to ``Bridge.admit``. Every refusal is ``Rejected(reason, kind)``; the kind is
a metrics label and what the HTTP layer maps to a status.
"""

from __future__ import annotations

import time

from bridge.peers import Peers
from bridge.sessions import EXPIRED, Session, SessionEnded, SessionError, SessionLost, SessionRegistry
from bridge.tokens import HEADER, Claims, ForeignIssuer, TokenError, TokenExpired, TokenSigner


class Rejected(Exception):
    """Refused before reaching the upstream: a one-line ``reason`` and its ``kind`` (a metrics label,
    what the HTTP layer maps to a status code, ``bridge.http.responses.STATUS``, and to Gym's failure
    kind, ``bridge.failures.of``)."""

    def __init__(self, reason: str, kind: str, retry_after: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.retry_after = retry_after


class Foreign(Rejected):
    """A verified token issued by another replica (``owner``) inside the configured peers: the surface
    relays the request to it (``bridge.http.forwarding``); where it cannot, this is the refusal."""

    def __init__(self, reason: str, owner: str) -> None:
        super().__init__(reason, "foreign")
        self.owner = owner


def _at(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def restarted_reason(sid: str, issued_at: int, started_at: float) -> str:
    """The refusal for a session this replica's previous process seeded (same key, same advertise
    URL): its state lived in that process's memory."""
    return (
        f"session lost: session {sid} was seeded at {_at(issued_at)} by this replica's previous process, "
        f"before this bridge restarted at {_at(started_at)} (the old process stopped before the session "
        "finished: killed, or its shutdown grace period ended); its state is gone; seed a new session"
    )


def released_reason(sid: str, issued_at: int) -> str:
    """The refusal for a session this process signed whose record is gone entirely (its tombstone
    was released too): named, never re-created."""
    return (
        f"unknown session {sid} (its token was issued at {_at(issued_at)}): never seeded here, or it ended "
        "(verified, closed, expired or released under state_budget_bytes) and its record was released; "
        "seed a new session"
    )


def verify_token(signer: TokenSigner | None, peers: Peers, token: str | None) -> Claims:
    """The verified claims of a session token; ``Foreign`` for another replica's token inside the
    peers, ``Rejected`` (missing, not_ready, token_expired, token, peer) otherwise."""
    if not token:
        raise Rejected(f"missing session token: send the {HEADER} header from /seed_session", "missing")
    if signer is None:
        raise Rejected("bridge not ready", "not_ready")
    try:
        return signer.verify(token)
    except ForeignIssuer as exc:
        raise foreign(peers, exc) from exc
    except TokenExpired as exc:
        raise Rejected(str(exc), "token_expired") from exc
    except TokenError as exc:
        raise Rejected(str(exc), "token") from exc


def foreign(peers: Peers, exc: ForeignIssuer) -> Rejected:
    """Another replica's verified token: ``Foreign`` (forward it) when its issuer is a peer, else
    the refusal naming the issuer (nobody is contacted)."""
    owner = exc.claims.issuer
    if peers.allows(owner):
        return Foreign(str(exc), owner)
    return Rejected(
        f"session token was issued by another replica ({owner}), which is outside this "
        f"deployment's peers ({peers}): not forwarded; send this session's requests there, or "
        "add it to peers (--peers / GYM_MCP_BRIDGE_PEERS)",
        "peer",
    )


def admit(
    sessions: SessionRegistry,
    generation: int,
    started_at: float,
    claims: Claims,
    tool: str | None = None,
    finished_ok: bool = False,
    boot: str | None = None,
) -> Session:
    """The session verified ``claims`` name (on the upstream's ``generation``), and ``tool`` in its
    allow-list; Rejected otherwise. A finished session (its /verify answered) serves only
    ``finished_ok`` requests: a repeated verify, close. A token of another ``boot`` (this replica's
    previous process) names a session that died with that process."""
    if boot is not None and claims.boot is not None and claims.boot != boot:
        raise Rejected(restarted_reason(claims.sid, claims.issued_at, started_at), "lost")
    try:
        session = sessions.get(claims.sid, generation, finished_ok)
    except SessionLost as exc:
        raise Rejected(str(exc), "lost") from exc
    except SessionEnded as exc:
        raise Rejected(str(exc), "expired" if exc.why == EXPIRED else "ended") from exc
    except SessionError as exc:
        if claims.boot is None and claims.issued_at < int(started_at):  # an older token: by its time
            raise Rejected(restarted_reason(claims.sid, claims.issued_at, started_at), "lost") from exc
        raise Rejected(released_reason(claims.sid, claims.issued_at), "session") from exc
    if tool is not None and not claims.allows(tool, session.tool_names):
        allowed = ", ".join(claims.tools if claims.tools is not None else session.tool_names) or "none"
        raise Rejected(f"tool {tool!r} is not in this session's allow-list ({allowed})", "allow_list")
    return session
