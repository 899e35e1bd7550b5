"""Signed per-rollout session tokens (JWT, HS256, PyJWT).

``TokenSigner.issue`` makes the token handed out by ``/seed_session``: claims ``sid`` (session
id), ``iss`` (this replica's advertise URL), ``aud`` (the server name), ``iat``, ``exp`` and
the session's tool allow-list: ``tools`` (the names) when they fit ``INLINE_TOOLS_BYTES``, else
``tools_sha256`` (a digest of the names, checked against the session's tool set), so a row with
hundreds of tools still gets a token that fits a header, and ``boot`` (the issuing process's random
boot id, ``BOOT_ID``): a replica that restarts under the same advertise URL tells a session of the
process it replaced from one it never had. The upstream cookie never goes into a token.
``TokenSigner.verify`` checks, in order: size, signature under any of the configured keys (the
first key signs; the rest allow rotation), expiry and not-before, audience, issuer. Each failure
raises ``TokenError`` with its own one-line reason; a token that verifies but names another replica
as its issuer raises ``ForeignIssuer`` (a ``TokenError`` naming that replica's URL, carrying the
verified claims: the request can be forwarded there, see ``forwarding``). Verified claims are
cached per token string until they expire (another replica's in a cache of their own, so the
hot path -- this replica's tokens -- is one dictionary lookup), so each token is decoded once.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import jwt

HEADER = "X-NeMo-Gym-Session-Token"
_RAW_HEADER = HEADER.lower().encode("latin-1")
MAX_TOKEN_BYTES = 8192
INLINE_TOOLS_BYTES = 2048  # a larger allow-list travels as its digest
_CACHE_SIZE = 16384
BOOT_ID = secrets.token_hex(8)  # this process's: sessions live in its memory and die with it


class TokenError(Exception):
    """A token was refused; str(exc) is the one-line reason given to the client."""


class TokenExpired(TokenError):
    """The token's ``exp`` has passed: its session expired with it."""


class ForeignIssuer(TokenError):
    """The token verifies under this deployment's key but was issued by another replica
    (``claims.issuer``, its advertise URL): that replica owns the session."""

    def __init__(self, reason: str, claims: Claims) -> None:
        super().__init__(reason)
        self.claims = claims


@dataclass(frozen=True, slots=True)
class Claims:
    sid: str
    issuer: str
    audience: str
    issued_at: int
    expires_at: int
    tools: tuple[str, ...] | None  # None when the token carries the allow-list's digest instead
    tools_sha256: str | None = None
    boot: str | None = None  # the issuing process's boot id (None: a token from before the claim)

    def allows(self, tool: str, session_tools: tuple[str, ...]) -> bool:
        """Whether ``tool`` is in the allow-list the token was issued with."""
        if self.tools is not None:
            return tool in self.tools
        return tool in session_tools and tools_digest(session_tools) == self.tools_sha256


def tools_digest(tools: tuple[str, ...]) -> str:
    return hashlib.sha256(json.dumps(list(tools)).encode()).hexdigest()


class TokenSigner:
    def __init__(self, keys: list[str], issuer: str, audience: str, boot: str = BOOT_ID) -> None:
        if not keys:
            raise ValueError("at least one signing key is needed")
        self._keys = keys
        self.issuer = issuer
        self.audience = audience
        self.boot = boot
        self._cache: OrderedDict[str, Claims] = OrderedDict()
        self._foreign: OrderedDict[str, Claims] = OrderedDict()  # verified, issued by other replicas

    def issue(self, sid: str, tools: tuple[str, ...], ttl_s: float, now: float | None = None) -> str:
        issued = int(now if now is not None else time.time())
        payload = {
            "sid": sid,
            "iss": self.issuer,
            "aud": self.audience,
            "iat": issued,
            "nbf": issued,
            "exp": issued + int(ttl_s),
            "boot": self.boot,
        }
        if len(json.dumps(list(tools))) <= INLINE_TOOLS_BYTES:
            payload["tools"] = list(tools)
        else:
            payload["tools_sha256"] = tools_digest(tools)
        return jwt.encode(payload, self._keys[0], algorithm="HS256")

    def verify(self, token: str) -> Claims:
        now = time.time()
        cached = self._cache.get(token)
        if cached is not None:
            if cached.expires_at > now:
                return cached
            del self._cache[token]
            raise TokenExpired("session token expired")
        claims = self._foreign.get(token)
        if claims is not None and claims.expires_at <= now:
            del self._foreign[token]
            raise TokenExpired("session token expired")
        if claims is None:
            claims = self._decode(token)
            cache = self._cache if claims.issuer == self.issuer else self._foreign
            cache[token] = claims
            if len(cache) > _CACHE_SIZE:
                cache.popitem(last=False)
        if claims.issuer != self.issuer:
            raise ForeignIssuer(
                f"session token was issued by another replica ({claims.issuer}); "
                f"send this session's requests there, not to {self.issuer}",
                claims,
            )
        return claims

    def _decode(self, token: str) -> Claims:
        if len(token) > MAX_TOKEN_BYTES:
            raise TokenError(f"session token too large ({len(token)} bytes, limit {MAX_TOKEN_BYTES})")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:  # DecodeError, and a header PyJWT refuses (e.g. a bad kid)
            raise TokenError("session token is malformed (not a JWT)") from exc
        if header.get("alg") != "HS256":
            raise TokenError(f"session token algorithm {header.get('alg')!r} is not accepted (HS256 only)")
        payload = None
        for key in self._keys:
            try:
                payload = jwt.decode(
                    token,
                    key,
                    algorithms=["HS256"],
                    options={
                        "verify_aud": False,
                        "verify_iss": False,
                        "require": ["sid", "exp", "iat", "iss"],
                    },
                    leeway=0,
                )
                break
            except jwt.InvalidSignatureError:
                continue
            except jwt.ExpiredSignatureError as exc:
                raise TokenExpired("session token expired") from exc
            except jwt.ImmatureSignatureError as exc:
                raise TokenError("session token is not valid yet (nbf/iat in the future)") from exc
            except jwt.MissingRequiredClaimError as exc:
                raise TokenError(f"session token lacks the {exc.claim!r} claim") from exc
            except jwt.InvalidTokenError as exc:
                raise TokenError(f"session token is invalid: {exc}") from exc
        if payload is None:
            raise TokenError("session token signature is invalid (not signed by this deployment's key)")
        if not isinstance(payload.get("iss"), str):
            raise TokenError("session token has a malformed iss claim")
        if payload.get("aud") != self.audience:
            raise TokenError(
                f"session token is for server {payload.get('aud')!r}, this bridge serves {self.audience!r}"
            )
        digest = payload.get("tools_sha256")
        tools = payload.get("tools", [] if digest is None else None)
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)):
            raise TokenError("session token has a malformed tools claim")
        if digest is not None and not isinstance(digest, str):
            raise TokenError("session token has a malformed tools_sha256 claim")
        boot = payload.get("boot")
        if boot is not None and not isinstance(boot, str):
            raise TokenError("session token has a malformed boot claim")
        return Claims(
            sid=str(payload["sid"]),
            issuer=str(payload["iss"]),
            audience=str(payload["aud"]),
            issued_at=int(payload["iat"]),
            expires_at=int(payload["exp"]),
            tools=tuple(tools) if tools is not None else None,
            tools_sha256=digest if tools is None else None,
            boot=boot,
        )


def from_headers(headers: Mapping[str, str], *, bearer: bool) -> str | None:
    """The session token of a request: X-NeMo-Gym-Session-Token, else (on /mcp) a Bearer token."""
    token = headers.get(HEADER)
    if token:
        return token.strip()
    return _bearer(headers.get("authorization", "")) if bearer else None


def from_raw_headers(headers: Mapping[bytes, bytes]) -> str | None:
    """``from_headers(..., bearer=True)`` over raw ASGI headers (names lower-cased), for the fast path."""
    token = headers.get(_RAW_HEADER)
    if token:
        return token.decode("latin-1").strip()
    return _bearer(headers.get(b"authorization", b"").decode("latin-1"))


def _bearer(authorization: str) -> str | None:
    return authorization[7:].strip() if authorization[:7].lower() == "bearer " else None
