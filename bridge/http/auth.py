"""The REST API key check: who may use the Gym-compatible REST surface when ``api_key`` is set.

The key is accepted in one of two ``Authorization`` forms:

- ``Bearer <api_key>``;
- ``Basic <base64(user:api_key)>``: the key as the password, any user name. This is what a client
  sends when the only place it can put a credential is the URL (``http://user:KEY@host:8000``:
  aiohttp, requests, urllib3 and curl turn the URL's user info into this header), such as NeMo
  Evaluator's Gym client, whose HTTP session takes no headers.

Both comparisons are constant time (``hmac.compare_digest``) and both are always made, so the
answer's timing says nothing about which form came closer. Nothing here logs: the header, and so
the key, never reaches a log line.
"""

from __future__ import annotations

import base64
import binascii
import hmac

REFUSAL = (
    "missing or wrong API key: send 'Authorization: Bearer <api_key>', or Basic with the key as the "
    "password (http://user:<api_key>@host/ in a client's URL)"
)


def _basic_password(given: bytes) -> bytes | None:
    """The password of an ``Authorization: Basic`` value, or None when it is not one."""
    scheme, _, encoded = given.partition(b" ")
    if scheme.lower() != b"basic" or not encoded or b" " in encoded:
        return None
    try:
        decoded = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None
    _user, colon, password = decoded.partition(b":")
    return password if colon else None


def api_key_accepted(authorization: str | None, key: str) -> bool:
    """Whether an ``Authorization`` header value carries ``key`` (Bearer, or Basic as the password).
    An empty key never matches (settings refuse one; this holds even if one got here)."""
    if not key:
        return False
    given = (authorization or "").encode("latin-1", "replace")  # Starlette decodes headers as Latin-1
    expected = key.encode()
    bearer = hmac.compare_digest(given, b"Bearer " + expected)
    password = _basic_password(given)
    basic = hmac.compare_digest(password or b"", expected)  # an empty password never equals a key
    return bearer or basic
