"""The upstream Gym resources server, behind a small public surface.

- ``process``: ``Upstream``, its lifecycle (spawn, probe, supervise, stop) and ``post``;
- ``transport``: the keep-alive HTTP/1.1 pool, request checks and the errors a request raises;
- ``response``: ``UpstreamResponse``, an answer as plain values;
- ``boot``: the script a managed upstream runs under Gym's interpreter (never imported here);
- ``envs``: per-environment Python environments, built as Gym's runner builds them;
- ``mcp``: tools and calls of an upstream that serves its tools on its own ``/mcp``;
- ``cookies``: an upstream session's cookie jar.

Above this package, ``Upstream``, ``UpstreamResponse`` and the errors are imported from here;
``mcp``, ``cookies`` and ``envs`` as modules; ``transport`` internals by nobody but
``process`` (and the pool's own tests and benchmark).
"""

from bridge.upstream.child import BootInfo
from bridge.upstream.process import Upstream, UpstreamStartError
from bridge.upstream.response import UpstreamResponse
from bridge.upstream.transport import (
    UpstreamRequestRefused,
    UpstreamTimeout,
    UpstreamUnavailable,
    check_request,
)

__all__ = [
    "BootInfo",
    "Upstream",
    "UpstreamRequestRefused",
    "UpstreamResponse",
    "UpstreamStartError",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "check_request",
]
