"""The one client every request to the upstream goes through: ``UpstreamClient.send``.

An ``http://`` upstream (a managed child always) is spoken to over the keep-alive pool alone
(``transport.KeepAlivePool``: its tool calls, seeds and verifies, its ``/openapi.json`` and the
readiness probes); an ``https://`` upstream over httpx (TLS with the CA bundle), behind the same
method. Either way a request is checked by ``check_request`` before a byte is written, and a
failure is a ``TimeoutError`` (the budget ran out) or an ``OSError`` (not sent, or the answer
broke off); ``process.Upstream`` names the cause. A request's budget bounds the upstream's time
alone (None: no bound, as Gym's own clients set none): waiting for a free connection of the pool
never counts against it, connecting has its own ``CONNECT_TIMEOUT_S``, and a probe (a GET) waits
for a connection no longer than its budget.
"""

from __future__ import annotations

import importlib.util
import ssl
import sys
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx

from bridge.settings import Settings
from bridge.upstream.requestcheck import check_request
from bridge.upstream.response import UpstreamResponse
from bridge.upstream.transport import ConnectTimeout, KeepAlivePool, PoolStats

CONNECT_TIMEOUT_S = 5.0  # one connect attempt to the upstream (nothing sent yet)
# Unset upstream_connections: the pool starts at this many and grows while the upstream keeps up
# (``gate.Gate``), up to a quarter of the open-file limit
ADAPTIVE_FLOOR = 256

# httpcore runs ``import sniffio`` on every request (to tell asyncio from trio) and falls back to
# asyncio when it is missing; without sniffio installed each of those imports searches sys.path
# again, about a tenth of the bridge's CPU per tool call in a profile. Record the miss once.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]


def tls_verification(url: str | None) -> ssl.SSLContext | bool:
    """What the upstream's httpx client verifies TLS with. An ``https`` upstream: the CA bundle, as
    httpx does by default. Any other (a managed child, an ``http`` URL) is only ever spoken to in
    plain HTTP, redirects not followed: a context that trusts no certificate at all, so a TLS peer
    is refused, without loading the CA bundle for nothing (15 to 40 ms of CPU and 1.4 MB at a start)."""
    if url is not None and url.lower().startswith("https:"):
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and host names; trusts none


class UpstreamClient:
    """The keep-alive pool of an ``http://`` upstream (made on its first request, again when the URL
    changes) and the httpx client of an ``https://`` one."""

    def __init__(self, settings: Settings, mode: str, url: str | None) -> None:
        self.settings = settings
        self.mode = mode
        self.limit = settings.connection_bounds()[0]  # the file limit is raised by now (``serve``)
        self.httpx = httpx.AsyncClient(
            # Never keep cookies in the shared client: each request carries exactly its session's cookie.
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
            # The read budget is each request's own; waiting for a pooled connection is not bounded.
            timeout=httpx.Timeout(settings.tool_timeout_s, connect=CONNECT_TIMEOUT_S, pool=None),
            limits=httpx.Limits(
                max_connections=self.limit,
                max_keepalive_connections=max(4, min(256, self.limit // 8)),
                keepalive_expiry=60,
            ),
            verify=tls_verification(url),
        )
        self.pool: KeepAlivePool | None = None

    async def send(
        self,
        url: str,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        budget: float | None,
        via_httpx: bool = False,
    ) -> UpstreamResponse:
        """``method`` (GET or POST) ``path`` at ``url``: ``UpstreamRequestRefused`` (nothing sent)
        for a path or header that fails ``check_request``; TimeoutError when the upstream did not
        answer within ``budget`` (None: no limit; a GET, a probe, always has one and counts its wait
        for a connection in it); ``OSError`` when it could not be sent or its answer broke off.
        ``via_httpx``: over httpx whatever the URL (its tests)."""
        if via_httpx or not url.startswith("http://"):
            check_request(path, headers)  # also here: this path must refuse what the pool refuses
            content = body if method == "POST" else None
            timeout = httpx.Timeout(
                budget, connect=CONNECT_TIMEOUT_S, pool=budget if method == "GET" else None
            )
            try:
                answer = await self.httpx.request(
                    method, f"{url}{path}", content=content, headers=headers, timeout=timeout
                )
            except (httpx.ConnectTimeout, httpx.PoolTimeout) as exc:  # nothing sent
                raise ConnectTimeout(f"no connection to {url} within the budget: {exc}") from exc
            except httpx.TimeoutException as exc:
                raise TimeoutError(str(exc)) from exc
            except httpx.HTTPError as exc:
                raise ConnectionError(
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                ) from exc
            return UpstreamResponse(
                answer.status_code, [(k.lower(), v) for k, v in answer.headers.raw], answer.content
            )
        pool = self.pool
        if pool is None or pool.url != url:
            if pool is not None:
                pool.close()
            # Reuse an idle connection only well inside the server's keep-alive window, so the
            # upstream never closes one under a request we just wrote: ours runs uvicorn with 75 s;
            # an external server may use uvicorn's default 5 s.
            expiry = 60.0 if self.mode == "managed" else 4.0
            fixed = self.settings.upstream_connections is not None  # else adaptive, up to the limit
            pool = self.pool = KeepAlivePool(
                url,
                max_connections=self.limit if fixed else min(ADAPTIVE_FLOOR, self.limit),
                expiry_s=expiry,
                connect_timeout_s=CONNECT_TIMEOUT_S,
                ceiling=None if fixed else self.limit,
            )
        if method == "GET":
            status, raw_headers, content_bytes = await pool.get(path, budget if budget is not None else 10.0)
        else:
            status, raw_headers, content_bytes = await pool.post(path, body, headers, budget)
        return UpstreamResponse(status, raw_headers, content_bytes)

    def stats(self) -> PoolStats:
        """The pool's connections now: in use, idle, requests queued for one, the bound."""
        if self.pool is None:
            return PoolStats(limit=self.limit)
        return self.pool.stats()

    async def aclose(self) -> None:
        await self.httpx.aclose()
        if self.pool is not None:
            self.pool.close()
