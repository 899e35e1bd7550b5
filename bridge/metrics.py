"""Prometheus metrics (prometheus-client), one registry per app so tests can run several bridges.

The app records into ``Metrics`` as requests pass; ``GET /metrics`` renders ``registry``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.tool_calls = Counter(
            "gym_mcp_bridge_tool_calls",
            "Tool calls served, by tool, transport and outcome",
            ["tool", "transport", "outcome"],
            registry=r,
        )
        self.tool_latency = Histogram(
            "gym_mcp_bridge_tool_call_seconds",
            "Tool call latency including the upstream",
            ["transport"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.sessions_active = Gauge("gym_mcp_bridge_sessions_active", "Open sessions", registry=r)
        self.sessions_created = Counter("gym_mcp_bridge_sessions_created", "Sessions seeded", registry=r)
        self.rejections = Counter(
            "gym_mcp_bridge_rejections",
            "Requests refused before reaching the upstream, by reason",
            ["reason"],
            registry=r,
        )
        self.verify_outcomes = Counter(
            "gym_mcp_bridge_verify", "Verify calls by outcome", ["outcome"], registry=r
        )
        self.verify_latency = Histogram(
            "gym_mcp_bridge_verify_seconds",
            "Verify latency including the upstream",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.normalizations = Counter(
            "gym_mcp_bridge_name_normalizations",
            "Tool names resolved before verify, by convention",
            ["convention"],
            registry=r,
        )
        self.upstream_up = Gauge(
            "gym_mcp_bridge_upstream_up", "1 when the upstream answers and tools are loaded", registry=r
        )
        self.upstream_restarts = Gauge(
            "gym_mcp_bridge_upstream_restarts", "Upstream restarts since start", registry=r
        )

        self._per_call: dict[tuple[str, str, str], tuple[Any, Any]] = {}

    def tool_call(self, tool: str, transport: str, outcome: str, seconds: float) -> None:
        """Count one tool call and observe its latency (the labelled children are looked up once)."""
        key = (tool, transport, outcome)
        children = self._per_call.get(key)
        if children is None:
            children = (self.tool_calls.labels(*key), self.tool_latency.labels(transport))
            if len(self._per_call) < 4096:  # tool names come from the upstream or the rows: bounded
                self._per_call[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
