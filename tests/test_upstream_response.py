"""``UpstreamResponse``: how the bridge reads an upstream's answer on the hot path.

What a tool call's ``structuredContent`` and text are built from, so each reading is pinned: JSON
with integers beyond 64 bits parses with each integer exact (orjson alone reads them as floats),
NaN/Infinity (not JSON) are refused rather than passed on as floats no client can parse, header
names match case-insensitively and repeat (Set-Cookie), and the text decodes as httpx decodes it.
"""

from __future__ import annotations

import httpx
import pytest

from bridge.upstream import UpstreamResponse

JSON = [(b"content-type", b"application/json")]


def test_json_beyond_64_bit_integers_parses_exact() -> None:
    # 2**70 + 1: no float holds it, so a float would not compare equal (2**70 alone would)
    answer = UpstreamResponse(200, JSON, b'{"n": 1180591620717411303425, "m": [1.5, -2]}')
    assert repr(answer.json()) == repr({"n": 2**70 + 1, "m": [1.5, -2]})


@pytest.mark.parametrize("body", [b'{"n": NaN}', b'{"n": Infinity}', b'{"n": -Infinity}', b"{not json"])
def test_not_json_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        UpstreamResponse(200, JSON, body).json()


def test_headers_by_lowercased_name_and_repeated() -> None:
    answer = UpstreamResponse(
        200, [(b"content-type", b"application/json"), (b"set-cookie", b"a=1"), (b"set-cookie", b"b=2")], b"{}"
    )
    assert answer.header("Content-Type") == "application/json" == answer.content_type
    assert answer.header_list("Set-Cookie") == ["a=1", "b=2"]
    assert answer.header("x-missing") is None and answer.header_list("x-missing") == []
    assert answer.is_success and not UpstreamResponse(422, JSON, b"{}").is_success


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        (b"application/json", '{"text": "caf\u00e9 \u2713"}'.encode()),
        (b"text/plain; charset=iso-8859-1", "caf\u00e9".encode("latin-1")),
        (b'text/plain; charset="utf-8"', "\u2713".encode()),
        (b"text/plain; charset=no-such-codec", "caf\u00e9".encode()),
        (b"application/json", b"\xff\xfe broken utf-8"),
    ],
)
def test_text_decodes_as_httpx_does(content_type: bytes, body: bytes) -> None:
    ours = UpstreamResponse(200, [(b"content-type", content_type)], body).text
    theirs = httpx.Response(200, headers={"content-type": content_type.decode()}, content=body).text
    assert ours == theirs
