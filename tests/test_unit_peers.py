"""Unit tests for bridge.peers.PeerPattern: the pattern grammar its docstring gives
(``[scheme://]host[:port]``, ``*`` any host, ``*.suffix``, no port or ``:*`` any port), including
``http://*:8000``, the pattern compose's replicas profile uses (any container of the project network,
on the bridge's port)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from bridge.peers import PeerPattern


@pytest.mark.parametrize(
    ("pattern", "url", "expected"),
    [
        ("http://*:8000", "http://0f1e2d3c4b5a:8000", True),
        ("http://*:8000", "http://0f1e2d3c4b5a:8001", False),
        ("http://*:8000", "https://0f1e2d3c4b5a:8000", False),
        ("*", "https://anything.example:9", True),
        ("http://*.bridge.ns.svc:8000", "http://b-0.bridge.ns.svc:8000", True),
        ("http://*.bridge.ns.svc:8000", "http://bridge.ns.svc:8000", False),
        ("http://gym-bridge", "http://gym-bridge:1234", True),
        ("http://gym-bridge:*", "http://other:1234", False),
    ],
)
def test_patterns_match_as_documented(pattern: str, url: str, expected: bool) -> None:
    assert PeerPattern.parse(pattern).matches(urlsplit(url)) is expected


@pytest.mark.parametrize("pattern", ["http://*x:8000", "ftp://*", "http://*:notaport"])
def test_malformed_patterns_are_refused_with_the_reason(pattern: str) -> None:
    with pytest.raises(ValueError, match="peer pattern"):
        PeerPattern.parse(pattern)
