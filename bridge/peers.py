"""Which other replicas this one may contact: the ``peers`` setting, by default derived from the
advertise URL (``default_peers``).

``Bridge.authorize`` asks ``Peers.allows`` about the issuer of a token signed with the shared key
by another replica: inside the peers, the HTTP layer relays the request there
(``bridge.http.forwarding``); outside, it is refused without contacting anyone.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_VERDICTS = 1024


@dataclass(frozen=True, slots=True)
class PeerPattern:
    """``[scheme://]host[:port]``: ``host`` exact, ``*.suffix`` (any name under ``suffix``) or ``*``;
    no port or ``:*`` = any port; no scheme = http or https."""

    text: str
    scheme: str | None
    host: str  # lower case, IPv6 without brackets; "*" any; ".suffix" a suffix
    port: int | None

    @classmethod
    def parse(cls, text: str) -> PeerPattern:
        raw = text.strip().rstrip("/")
        scheme, sep, rest = raw.partition("://")
        if not sep:
            scheme, rest = "", raw
        elif scheme not in _DEFAULT_PORTS:
            raise ValueError(f"peer pattern {text!r}: scheme must be http or https")
        any_port = rest.endswith(":*")
        if any_port:
            rest = rest[:-2]
        wildcard = rest.startswith("*")
        probe = "x" + rest[1:] if wildcard else rest  # urlsplit does not take '*' as a host
        try:
            parts = urlsplit(f"//{probe}")
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"peer pattern {text!r}: {exc}") from exc
        host = parts.hostname or ""
        if parts.path or parts.query or parts.fragment or parts.username is not None or not host:
            raise ValueError(f"peer pattern {text!r}: expected [scheme://]host[:port], e.g. *.bridge.ns.svc")
        if wildcard:
            if rest == "*" or (rest.startswith("*:") and port is not None):  # any host (on that port)
                host = "*"
            elif rest.startswith("*.") and len(rest) > 2:
                host = host[1:]  # ".suffix"
            else:
                raise ValueError(f"peer pattern {text!r}: '*' only as the whole host or as '*.suffix'")
        return cls(text.strip(), scheme or None, host, None if any_port else port)

    def matches(self, url: SplitResult) -> bool:
        if self.scheme is not None and url.scheme != self.scheme:
            return False
        host = (url.hostname or "").lower()
        if self.host == "*":
            pass
        elif self.host.startswith("."):
            if not host.endswith(self.host) or len(host) == len(self.host):
                return False
        elif host != self.host:
            return False
        return self.port is None or (url.port or _DEFAULT_PORTS.get(url.scheme)) == self.port


def default_peers(advertise_url: str) -> list[str]:
    """The peers a replica contacts when ``peers`` is not set, from its own advertise URL:

    - a DNS name of three labels or more (``bridge-0.bridge.ns.svc``): every name under its domain
      suffix, same scheme and port (``http://*.bridge.ns.svc:8000``): a StatefulSet's pods behind
      their headless Service;
    - loopback (``127.0.0.1``, ``localhost``, ``[::1]``): any loopback name, any port (replicas on
      one machine);
    - another IP address or a shorter name: that host, any port."""
    url = urlsplit(advertise_url)
    scheme, host = url.scheme, (url.hostname or "").lower()
    port = url.port or _DEFAULT_PORTS.get(scheme, 80)
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if host == "localhost" or (address is not None and address.is_loopback):
        return [f"{scheme}://{name}:*" for name in _LOOPBACK_NAMES]
    if address is not None:
        return [f"{scheme}://[{host}]:*" if address.version == 6 else f"{scheme}://{host}:*"]
    labels = host.split(".")
    if len(labels) >= 3:
        return [f"{scheme}://*.{'.'.join(labels[1:])}:{port}"]
    return [f"{scheme}://{host}:*"]


def parse_peers(patterns: Iterable[str]) -> list[PeerPattern]:
    """Each pattern parsed; ValueError naming the first bad one."""
    return [PeerPattern.parse(p) for p in patterns]


class Peers:
    """The replicas this one may forward to."""

    def __init__(self, patterns: list[str]) -> None:
        self.patterns = parse_peers(patterns)
        # Every forwarded call asks about the same few owners: each verdict is remembered (an owner
        # comes from a token signed with the shared key; the patterns never change).
        self._remembered = functools.lru_cache(maxsize=_VERDICTS)(self._judge)

    def allows(self, owner: str) -> bool:
        """Whether ``owner`` is a plain base URL (no credentials, path, query) matching a pattern."""
        return self._remembered(owner)

    def _judge(self, owner: str) -> bool:
        try:
            url = urlsplit(owner)
            url.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            return False
        if url.scheme not in _DEFAULT_PORTS or not url.hostname or url.username is not None:
            return False
        if url.path not in ("", "/") or url.query or url.fragment:
            return False
        return any(p.matches(url) for p in self.patterns)

    def __str__(self) -> str:
        return ", ".join(p.text for p in self.patterns) or "none: forwarding is off"
