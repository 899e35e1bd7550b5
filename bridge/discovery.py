"""What the upstream offers, read once when it is ready: its tools, its routes, where its ``/verify``
takes Gym's ``mcp_tool_call_provenance``, and whether it routes Gym's ``/ng-rollout/<id>/`` prefix.

``Bridge.load_tools`` calls ``discover`` after the upstream answers and keeps the ``Offer``: the tools
come from the upstream's ``/openapi.json`` (one per POST route, or a catch-all dispatcher whose
tools come from each row), plus those an ``MCPResourcesServer`` lists on its own ``/mcp``; names
some clients cannot accept are logged, not refused. The document itself is kept on the ``ToolSets``
(the bridge's own ``/openapi.json`` is made from it). Nothing here holds state or touches sessions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bridge import tools as tools_mod
from bridge.scoring import call_provenance
from bridge.settings import Settings
from bridge.tools import ToolSets
from bridge.upstream import Upstream
from bridge.upstream import mcp as upstream_mcp

log = logging.getLogger("gym_mcp_bridge")


@dataclass(frozen=True, slots=True)
class Offer:
    toolsets: ToolSets
    routes: frozenset[str]  # the upstream's paths, without slashes
    provenance_places: frozenset[str]  # where its /verify model takes Gym's provenance sidecar
    mcp_native: frozenset[str]  # tools served on the upstream's own /mcp
    rollout_prefix: bool  # it routes /ng-rollout/<id>/<path> as /<path> itself (Gym >= 0.7)


async def discover(upstream: Upstream, settings: Settings) -> Offer:
    spec = await upstream.get_json("/openapi.json")
    openapi, catch_all, skipped = tools_mod.from_openapi(spec)
    for problem in skipped:
        log.warning("upstream route skipped, not served as a tool: %s", problem)
    listed = await upstream_mcp.discover(upstream)  # Gym's MCPResourcesServer: tools on its /mcp
    native, skipped_native = tools_mod.from_mcp_listing(listed)
    for problem in skipped_native:
        log.warning("upstream MCP tool skipped, not served: %s", problem)
    mcp_native: frozenset[str] = frozenset()
    if native:
        mcp_native = frozenset(t.name for t in native)
        openapi = tools_mod.ToolSet({**openapi.tools, **{t.name: t for t in native}})
        log.info("upstream serves tools on its own MCP endpoint: %s", ", ".join(sorted(mcp_native)))
    bad = tools_mod.unsafe_names(openapi.names, upstream.server_name)
    if bad:
        log.warning(
            "tool names some clients cannot accept (outside [A-Za-z0-9_-] or over 64 characters as "
            "mcp__%s__<tool>): %s",
            upstream.server_name,
            ", ".join(bad),
        )
    log.info(
        "tools from %s: %s%s",
        upstream.url,
        ", ".join(openapi.names) or "(none)",
        " (catch-all dispatcher: tools come from each row)" if catch_all else "",
    )
    return Offer(
        toolsets=ToolSets(openapi, catch_all, list(settings.tools_from), spec),
        routes=frozenset(p.strip("/") for p in spec.get("paths", {})),
        provenance_places=call_provenance.accepted_places(spec),
        mcp_native=mcp_native,
        rollout_prefix=await _routes_rollout_prefix(upstream),
    )


async def _routes_rollout_prefix(upstream: Upstream) -> bool:
    """Whether the upstream strips Gym's rollout prefix itself (nemo-gym >= 0.7's
    ``RolloutContextMiddleware``): then requests of a rollout reach it under that prefix, so its
    own calls (an LLM judge's model requests) keep the rollout's correlation."""
    try:
        await upstream.get_json("/ng-rollout/0/openapi.json")
    except Exception:  # 404 from an older Gym, or anything else: send bare paths
        return False
    return True
