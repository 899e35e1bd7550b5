"""Unit tests for bridge.tokens, in-process: TokenSigner.issue/verify, every reason a token is refused,
another replica's token (ForeignIssuer), the tool allow-list inline or as a digest, key rotation, and
reading the token off request headers.

Expected values come from the module docstring of bridge/tokens.py (claims ``sid iss aud iat exp`` and
``tools`` when the names fit ``INLINE_TOOLS_BYTES`` of JSON, else ``tools_sha256``; verify checks size,
signature under any configured key, expiry and not-before, audience, issuer, each with its own
one-line reason) and from RFC 7519/7515 (HS256, base64url ``header.payload.signature``): the odd
tokens below are built by hand so that PyJWT's own encoder cannot refuse them first.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import types
from typing import Any

import jwt
import pytest
from starlette.datastructures import Headers

from bridge import tokens
from bridge.tokens import (
    HEADER,
    INLINE_TOOLS_BYTES,
    MAX_TOKEN_BYTES,
    Claims,
    ForeignIssuer,
    TokenError,
    TokenSigner,
    from_headers,
    from_raw_headers,
)

KEY = "test-key-0123456789abcdef0123456789abcdef"
OLD_KEY = "old-key-0123456789abcdef0123456789abcdef0"
ME = "http://10.0.0.1:8080"
PEER = "http://10.0.0.2:8080"
SERVER = "example_simple_agent"


def signer(keys: list[str] | None = None, issuer: str = ME, audience: str = SERVER) -> TokenSigner:
    return TokenSigner(keys or [KEY], issuer, audience)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def craft(payload: Any, key: str = KEY, header: dict[str, Any] | None = None) -> str:
    """An HS256 JWS by hand (RFC 7515), for claims PyJWT's encoder would refuse to write."""
    head = b64(json.dumps(header or {"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(payload).encode())
    signature = hmac.new(key.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(signature)}"


def claims_now(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    payload: dict[str, Any] = {"sid": "s1", "iss": ME, "aud": SERVER, "iat": now, "nbf": now, "exp": now + 60}
    payload.update(changes)
    return {k: v for k, v in payload.items() if v is not None}


def refusal(token: str, by: TokenSigner | None = None) -> str:
    with pytest.raises(TokenError) as info:
        (by or signer()).verify(token)
    assert not isinstance(info.value, ForeignIssuer)
    return str(info.value)


# --------------------------------------------------------------------------------------------
# Issue and verify
# --------------------------------------------------------------------------------------------


def test_issue_then_verify_gives_the_claims() -> None:
    now = int(time.time())
    token = signer().issue("sid-1", ("read_file", "search"), ttl_s=90.9, now=now)
    claims = signer().verify(token)
    assert claims == Claims(
        sid="sid-1",
        issuer=ME,
        audience=SERVER,
        issued_at=now,
        expires_at=now + 90,  # whole seconds
        tools=("read_file", "search"),
        tools_sha256=None,
        boot=tokens.BOOT_ID,  # the issuing process: a restart under the same URL tells its sessions apart
    )
    assert (
        TokenSigner([KEY], ME, SERVER, boot="other")
        .verify(TokenSigner([KEY], ME, SERVER, boot="before").issue("sid-2", (), ttl_s=60))
        .boot
        == "before"
    ), "the boot claim is the issuer's, carried as signed"


def test_token_is_hs256_with_the_documented_claims() -> None:
    now = int(time.time())
    token = signer().issue("sid-1", ("a",), ttl_s=60, now=now)
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    payload = jwt.decode(token, KEY, algorithms=["HS256"], audience=SERVER)
    assert payload == {
        "sid": "sid-1",
        "iss": ME,
        "aud": SERVER,
        "iat": now,
        "nbf": now,
        "exp": now + 60,
        "tools": ["a"],
        "boot": tokens.BOOT_ID,
    }


def test_verify_is_stable_for_a_cached_token() -> None:
    s = signer()
    token = s.issue("sid-1", ("a",), ttl_s=60)
    assert s.verify(token) == s.verify(token)


def test_signer_needs_a_key() -> None:
    with pytest.raises(ValueError):
        TokenSigner([], ME, SERVER)


# --------------------------------------------------------------------------------------------
# Every refusal
# --------------------------------------------------------------------------------------------


def test_expired_token() -> None:
    token = signer().issue("s", (), ttl_s=10, now=time.time() - 100)
    assert refusal(token) == "session token expired"


def test_cached_token_is_refused_once_it_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    s = signer()
    now = time.time()
    token = s.issue("s", (), ttl_s=30, now=now)
    assert s.verify(token).sid == "s"  # now cached
    monkeypatch.setattr(tokens, "time", types.SimpleNamespace(time=lambda: now + 31))
    assert refusal(token, s) == "session token expired"


def test_cached_foreign_token_is_refused_once_it_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    mine = signer()
    now = time.time()
    token = signer(issuer=PEER).issue("s", (), ttl_s=30, now=now)
    with pytest.raises(ForeignIssuer):
        mine.verify(token)  # cached as another replica's
    monkeypatch.setattr(tokens, "time", types.SimpleNamespace(time=lambda: now + 31))
    assert refusal(token, mine) == "session token expired"


def test_token_not_valid_yet() -> None:
    token = signer().issue("s", (), ttl_s=60, now=time.time() + 300)
    assert refusal(token) == "session token is not valid yet (nbf/iat in the future)"


def test_token_signed_by_another_key() -> None:
    token = signer(keys=["someone-else-0123456789abcdef0123456789"]).issue("s", (), ttl_s=60)
    assert refusal(token) == "session token signature is invalid (not signed by this deployment's key)"


def test_tampered_payload_breaks_the_signature() -> None:
    token = signer().issue("s", ("a",), ttl_s=60)
    head, _, signature = token.split(".")
    forged = b64(json.dumps(claims_now(sid="other", tools=["a", "admin"])).encode())
    assert refusal(f"{head}.{forged}.{signature}") == (
        "session token signature is invalid (not signed by this deployment's key)"
    )


def test_token_for_another_server() -> None:
    token = signer(audience="other_server").issue("s", (), ttl_s=60)
    assert refusal(token) == f"session token is for server 'other_server', this bridge serves {SERVER!r}"


def test_token_without_audience() -> None:
    assert (
        refusal(craft(claims_now(aud=None)))
        == f"session token is for server None, this bridge serves {SERVER!r}"
    )


@pytest.mark.parametrize("token", ["", "garbage", "a.b", "a.b.c", "x" * MAX_TOKEN_BYTES])
def test_malformed_token(token: str) -> None:
    assert refusal(token) == "session token is malformed (not a JWT)"


def test_token_too_large() -> None:
    token = "x" * (MAX_TOKEN_BYTES + 1)
    assert refusal(token) == f"session token too large ({MAX_TOKEN_BYTES + 1} bytes, limit {MAX_TOKEN_BYTES})"


def test_large_valid_token_is_refused_for_its_size_before_its_signature_is_checked() -> None:
    padding = "p" * MAX_TOKEN_BYTES
    token = jwt.encode(claims_now(pad=padding, tools=[]), KEY, algorithm="HS256")
    assert refusal(token).startswith("session token too large")


@pytest.mark.parametrize(("alg", "key"), [("none", None), ("HS512", "k" * 64), ("HS384", "k" * 48)])
def test_only_hs256_is_accepted(alg: str, key: str | None) -> None:
    token = jwt.encode(claims_now(tools=[]), key, algorithm=alg)  # type: ignore[arg-type]  # "none" takes no key
    assert refusal(token) == f"session token algorithm {alg!r} is not accepted (HS256 only)"


@pytest.mark.parametrize("claim", ["sid", "exp", "iat", "iss"])
def test_required_claim_missing(claim: str) -> None:
    token = craft(claims_now(**{claim: None}))
    assert refusal(token) == f"session token lacks the {claim!r} claim"


@pytest.mark.parametrize("issuer", [5, ["http://x"], None])
def test_malformed_issuer(issuer: Any) -> None:
    payload = claims_now()
    payload["iss"] = issuer
    assert refusal(craft(payload)) in {
        "session token has a malformed iss claim",
        "session token lacks the 'iss' claim",  # JSON null is as good as missing
    }


@pytest.mark.parametrize("tools_claim", ["read_file", [1, 2], {"read_file": True}])
def test_malformed_tools_claim(tools_claim: Any) -> None:
    assert refusal(craft(claims_now(tools=tools_claim))) == "session token has a malformed tools claim"


def test_malformed_tools_digest_claim() -> None:
    assert refusal(craft(claims_now(tools_sha256=5))) == "session token has a malformed tools_sha256 claim"


@pytest.mark.parametrize("boot", [5, ["a"], {"id": "a"}])
def test_malformed_boot_claim(boot: Any) -> None:
    assert refusal(craft(claims_now(boot=boot))) == "session token has a malformed boot claim"


def test_exp_that_is_not_a_number_is_invalid() -> None:
    assert refusal(craft(claims_now(exp="tomorrow"))).startswith("session token is invalid: ")


def test_token_with_no_allow_list_allows_nothing() -> None:
    claims = signer().verify(craft(claims_now()))
    assert claims.tools == ()
    assert not claims.allows("read_file", ("read_file",))


# --------------------------------------------------------------------------------------------
# Another replica's token
# --------------------------------------------------------------------------------------------


def test_token_issued_by_a_peer_raises_foreign_issuer_with_its_claims() -> None:
    token = signer(issuer=PEER).issue("peer-sid", ("a",), ttl_s=60)
    mine = signer()
    for _ in range(2):  # first decoded, then from the foreign cache: the same answer
        with pytest.raises(ForeignIssuer) as info:
            mine.verify(token)
        assert isinstance(info.value, TokenError)
        assert info.value.claims.issuer == PEER
        assert info.value.claims.sid == "peer-sid"
        assert info.value.claims.tools == ("a",)
        assert PEER in str(info.value) and ME in str(info.value)


def test_peer_token_signed_with_another_key_is_not_foreign_but_invalid() -> None:
    token = signer(keys=["not-ours-0123456789abcdef0123456789abcd"], issuer=PEER).issue("s", (), ttl_s=60)
    assert refusal(token).startswith("session token signature is invalid")


# --------------------------------------------------------------------------------------------
# Key rotation
# --------------------------------------------------------------------------------------------


def test_rotation_verifies_under_any_key_and_signs_with_the_first() -> None:
    old = signer(keys=[OLD_KEY])
    rotated = signer(keys=[KEY, OLD_KEY])
    old_token = old.issue("old", (), ttl_s=60)
    assert rotated.verify(old_token).sid == "old"
    new_token = rotated.issue("new", (), ttl_s=60)
    assert jwt.decode(new_token, KEY, algorithms=["HS256"], audience=SERVER)["sid"] == "new"
    assert refusal(new_token, old).startswith("session token signature is invalid")
    assert signer(keys=[KEY]).verify(new_token).sid == "new"


# --------------------------------------------------------------------------------------------
# The tool allow-list: inline, or its digest
# --------------------------------------------------------------------------------------------


def names_of_json_length(total: int) -> tuple[str, ...]:
    """Tool names whose JSON list (``json.dumps``: ``["n1", "n2"]``) is exactly ``total`` characters:
    k names of 60 characters take k * 64 (quotes 2, separator ", " 2, brackets 2 in all)."""
    count, rest = divmod(total, 64)
    names = [f"tool_{i:02d}_".ljust(60, "x") for i in range(count)]
    names[-1] += "y" * rest
    return tuple(names)


def test_allow_list_inline_up_to_inline_tools_bytes() -> None:
    names = names_of_json_length(INLINE_TOOLS_BYTES)
    assert len(json.dumps(list(names))) == INLINE_TOOLS_BYTES
    claims = signer().verify(signer().issue("s", names, ttl_s=60))
    assert claims.tools == names and claims.tools_sha256 is None
    assert claims.allows(names[0], ())  # inline: the token alone decides
    assert not claims.allows("other", (*names, "other"))


def test_allow_list_past_inline_tools_bytes_travels_as_its_digest() -> None:
    names = names_of_json_length(INLINE_TOOLS_BYTES + 1)
    token = signer().issue("s", names, ttl_s=60)
    payload = jwt.decode(token, KEY, algorithms=["HS256"], audience=SERVER)
    assert "tools" not in payload
    assert payload["tools_sha256"] == hashlib.sha256(json.dumps(list(names)).encode()).hexdigest()
    claims = signer().verify(token)
    assert claims.tools is None
    assert claims.allows(names[0], names)
    assert not claims.allows("other", names)
    assert not claims.allows(names[0], (*names, "extra"))  # another tool set: digest differs
    assert not claims.allows(names[0], tuple(reversed(names)))


def test_hundreds_of_tools_still_give_a_token_that_fits_a_header() -> None:
    names = tuple(f"tool_{i:04d}_with_a_rather_long_descriptive_name" for i in range(500))
    token = signer().issue("s", names, ttl_s=60)
    assert len(token) < 1024
    assert signer().verify(token).allows("tool_0499_with_a_rather_long_descriptive_name", names)


# --------------------------------------------------------------------------------------------
# Reading the token off a request
# --------------------------------------------------------------------------------------------


def test_session_header_wins_over_bearer() -> None:
    headers = Headers({HEADER: " tok-header ", "authorization": "Bearer tok-bearer"})
    assert from_headers(headers, bearer=True) == "tok-header"
    assert from_headers(headers, bearer=False) == "tok-header"


def test_header_name_is_case_insensitive_through_starlette() -> None:
    assert from_headers(Headers({HEADER.lower(): "tok"}), bearer=False) == "tok"


def test_bearer_only_when_allowed() -> None:
    headers = Headers({"Authorization": "Bearer tok-bearer"})
    assert from_headers(headers, bearer=True) == "tok-bearer"
    assert from_headers(headers, bearer=False) is None


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_bearer_scheme_is_case_insensitive(scheme: str) -> None:
    assert from_headers(Headers({"authorization": f"{scheme} tok"}), bearer=True) == "tok"


@pytest.mark.parametrize("value", ["Basic dXNlcjpwYXNz", "Bearertok", "tok", "", "Token tok"])
def test_other_authorization_schemes_give_no_token(value: str) -> None:
    assert from_headers(Headers({"authorization": value}), bearer=True) is None


def test_empty_session_header_falls_back_to_bearer() -> None:
    headers = Headers({HEADER: "", "authorization": "Bearer tok"})
    assert from_headers(headers, bearer=True) == "tok"


def test_raw_headers_match_from_headers() -> None:
    name = HEADER.lower().encode("latin-1")
    assert from_raw_headers({name: b" tok-header ", b"authorization": b"Bearer b"}) == "tok-header"
    assert from_raw_headers({b"authorization": b"bearer tok-bearer"}) == "tok-bearer"
    assert from_raw_headers({b"authorization": b"Basic x"}) is None
    assert from_raw_headers({}) is None
