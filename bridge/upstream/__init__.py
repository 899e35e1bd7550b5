"""The upstream Gym resources server, behind a small public surface.

- ``process``: ``Upstream``, its lifecycle (spawn, probe, supervise, stop) and ``post``;
- ``client``: ``UpstreamClient``, the one client every request to the upstream goes through (the
  keep-alive pool for ``http://``, httpx for ``https://``);
- ``transport``: the keep-alive HTTP/1.1 client (``KeepAlivePool``; ``PeerClient`` to another
  replica) and the errors a request raises; ``gate``: how many of its requests hold a connection at
  once (fixed, or adaptive to the upstream); ``requestcheck``: what is never written to it;
- ``response``: ``UpstreamResponse``, an answer as plain values;
- ``child``: the managed child process (``BootInfo``: what it wrote once it bound);
- ``boot``: the script a managed upstream runs under Gym's interpreter (never imported here);
- ``envs``: per-environment Python environments, built as Gym's runner builds them;
- ``mcp``: tools and calls of an upstream that serves its tools on its own ``/mcp``;
- ``cookies``: an upstream session's cookie jar.

Above this package, the names below (``__all__``) are imported from here; ``mcp``, ``cookies`` and
``envs`` as modules. ``transport``, ``client``, ``process``, ``child`` and ``response`` are private
to this package (their own tests excepted): ``tests/test_architecture.py`` holds that.
"""

from bridge.upstream.child import BootInfo
from bridge.upstream.poolstats import WAIT_BUCKETS
from bridge.upstream.process import TimeLimit, Upstream, UpstreamStartError
from bridge.upstream.requestcheck import UpstreamRequestRefused, check_request
from bridge.upstream.response import UpstreamResponse
from bridge.upstream.transport import (
    ConnectTimeout,
    PeerClient,
    PoolStats,
    UpstreamTimeout,
    UpstreamUnavailable,
)

__all__ = [
    "WAIT_BUCKETS",
    "BootInfo",
    "ConnectTimeout",
    "PeerClient",
    "PoolStats",
    "TimeLimit",
    "Upstream",
    "UpstreamRequestRefused",
    "UpstreamResponse",
    "UpstreamStartError",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "check_request",
]
