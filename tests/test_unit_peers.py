"""Unit tests for bridge.peers.PeerPattern: the pattern grammar its docstring gives
(``[scheme://]host[:port]``, ``*`` any host, ``*.suffix``, no port or ``:*`` any port), including
``http://*:8000``, the pattern compose's replicas profile uses (any container of the project network,
on the bridge's port)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from bridge.peers import PeerPattern, Peers


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


def test_remembered_verdicts_stay_each_owners_own() -> None:
    """``Peers.allows`` remembers its verdicts: asked again, in any order and past the memo's bound,
    every owner gets the grammar's answer for itself, never a neighbour's (a look-alike host, the
    same host with credentials, a path or a bad port)."""
    peers = Peers(["http://*.bridge.ns.svc:8000"])
    owners: list[tuple[str, bool]] = []
    for i in range(1500):
        owners += [
            (f"http://b-{i}.bridge.ns.svc:8000", True),
            (f"http://b-{i}.bridge.ns.svc:8001", False),
            (f"http://b-{i}.bridge.ns.svc.evil.example:8000", False),
            (f"http://user@b-{i}.bridge.ns.svc:8000", False),
            (f"http://b-{i}.bridge.ns.svc:8000/mcp", False),
            (f"http://b-{i}.bridge.ns.svc:80000", False),
        ]
    for round_ in range(3):
        for owner, expected in owners[round_::2] + owners[::-1]:
            assert peers.allows(owner) is expected, owner
