"""An upstream session's cookie jar, kept as the ``Cookie`` header the bridge sends it.

Gym keys a rollout's state by its Starlette session cookie: every answer may refresh it
(``Set-Cookie``), and the bridge keeps one jar per session the way a browser would.
"""

from __future__ import annotations

import email.utils
import time


def merge_cookies(jar: str, set_cookies: list[str], now: float | None = None) -> str:
    """The ``Cookie`` header after the upstream's ``Set-Cookie`` lines, as a browser keeps it: each
    line replaces only the cookie of its own name, and one that expires it (``Max-Age`` <= 0 or an
    ``Expires`` in the past) removes it."""
    if len(set_cookies) == 1 and ";" not in jar:  # Gym's answers: its one session cookie, set again
        pair, _, after = set_cookies[0].partition(";")
        name, equals, value = pair.strip().partition("=")
        if name and equals and jar.strip().partition("=")[0] == name:
            moment = time.time() if now is None else now
            return "" if _expired(after.split(";"), moment) else f"{name}={value}"
    cookies: dict[str, str] = {}
    for pair in jar.split(";"):
        name, _, value = pair.strip().partition("=")
        if name:
            cookies[name] = value
    moment = time.time() if now is None else now
    for line in set_cookies:
        pair, *attributes = line.split(";")
        name, _, value = pair.strip().partition("=")
        if not name:
            continue
        cookies.pop(name, None)  # a replaced cookie moves to the end, as in a browser's header
        if not _expired(attributes, moment):
            cookies[name] = value
    return "; ".join(f"{name}={value}" for name, value in cookies.items())


def _expired(attributes: list[str], now: float) -> bool:
    for attribute in attributes:
        key, _, value = attribute.strip().partition("=")
        key = key.lower()
        if key == "max-age":
            try:
                return int(value.strip()) <= 0
            except ValueError:
                continue
        if key == "expires":
            try:
                return email.utils.parsedate_to_datetime(value.strip()).timestamp() <= now
            except (TypeError, ValueError):
                continue
    return False


def request_headers(jar: str) -> dict[str, str]:
    """The headers of a JSON request to the upstream carrying the session's jar."""
    headers = {"content-type": "application/json"}
    if jar:
        headers["cookie"] = jar
    return headers
