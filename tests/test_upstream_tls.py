"""The upstream's httpx client: a plain-HTTP upstream's client refuses every TLS peer.

A managed child or an ``http://`` upstream is only spoken to in plain HTTP, so its client does not
load the CA bundle (≈ 40 ms of a restart); what it gets instead must fail closed, never open. A local
TLS server with a self-signed certificate plays the peer: the plain-HTTP upstream's client must refuse
it, and a client told to trust that certificate must reach it (so the refusal is the trust, not a
broken server). An ``https://`` upstream keeps httpx's default verification.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bridge.settings import Settings
from bridge.upstream import Upstream
from bridge.upstream.client import tls_verification
from tests.fixtures.bridges import SECRET
from tests.fixtures.kube import make_ca

pytestmark = pytest.mark.anyio


@pytest.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    cert, key = make_ca(tmp_path)  # self-signed, for 127.0.0.1
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"https://127.0.0.1:{port}/", cert


@pytest.mark.parametrize("managed", [False, True])
async def test_a_plain_http_upstreams_client_refuses_every_tls_peer(
    tls_server: tuple[str, Path], managed: bool
) -> None:
    url, cert = tls_server
    settings = (
        Settings(secret=SECRET)  # managed: the child's URL is plain http, known once it runs
        if managed
        else Settings(upstream_url="http://127.0.0.1:9", secret=SECRET)
    )
    upstream = Upstream(settings)
    try:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await upstream.client.get(url)
    finally:
        await upstream.client.aclose()
    trusting = ssl.create_default_context(cafile=str(cert))
    async with httpx.AsyncClient(verify=trusting) as client:  # the same peer, trusted: reachable
        assert (await client.get(url)).text == "ok"


def test_an_https_upstream_keeps_httpx_default_verification() -> None:
    assert tls_verification("https://gym.example:8443") is True
    assert tls_verification("HTTPS://gym.example") is True
    for plain in ("http://127.0.0.1:8001", None):
        context = tls_verification(plain)
        assert isinstance(context, ssl.SSLContext)
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        assert context.cert_store_stats()["x509_ca"] == 0
