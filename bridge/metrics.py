"""Prometheus metrics (prometheus-client), one registry per app so tests can run several bridges.

The app records into ``Metrics`` as requests pass; ``GET /metrics`` renders ``registry``. The
connection pools are read when scraped (``watch_pool``): their connections, their queue depth and,
as the histogram ``gym_mcp_bridge_connection_wait_seconds``, how long requests waited for a
connection (the pools count the waits themselves, by ``bridge.upstream.WAIT_BUCKETS``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from bridge import failures
from bridge.upstream import WAIT_BUCKETS

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
        self.sessions_active = Gauge(
            "gym_mcp_bridge_sessions_active",
            "Unfinished sessions (seeded, not yet verified or closed)",
            registry=r,
        )
        self.sessions_finished = Gauge(
            "gym_mcp_bridge_sessions_finished",
            "Finished sessions still held for a repeated /verify",
            registry=r,
        )
        self.sessions_ended = Counter(
            "gym_mcp_bridge_sessions_ended",
            "Sessions released, by why (closed, expired, evicted, lost; shutdown: still open when the drain ended)",
            ["reason"],
            registry=r,
        )
        self.state_bytes = Gauge(
            "gym_mcp_bridge_state_bytes",
            "Bytes of session state held (rows, logs, cookies, replies)",
            registry=r,
        )
        self.state_budget_bytes = Gauge(
            "gym_mcp_bridge_state_budget_bytes", "The state budget (state_budget_bytes)", registry=r
        )
        self.retries = Counter(
            "gym_mcp_bridge_retries",
            "Repeated tool calls answered with the first call's answer, by how they were matched "
            "(jsonrpc_id, idempotency_key)",
            ["matched_by"],
            registry=r,
        )
        self.upstream_closes = Counter(
            "gym_mcp_bridge_upstream_closes",
            "Sessions the bridge ended and released on the upstream's /close_session, by outcome",
            ["outcome"],
            registry=r,
        )
        self.sessions_created = Counter("gym_mcp_bridge_sessions_created", "Sessions seeded", registry=r)
        self.rejections = Counter(
            "gym_mcp_bridge_rejections",
            "Requests the bridge refused by itself (before reaching the upstream, or an upstream that "
            "timed out or could not be reached), by reason",
            ["reason"],
            registry=r,
        )
        r.register(_ByFailureKind(self.rejections))
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
        # Connections and their queues, read when scraped (``watch_clients``, ``watch_pool``); the
        # process's open descriptors and their limit as process_open_fds / process_max_fds.
        self.connections = Gauge(
            "gym_mcp_bridge_connections",
            "Connections open now, by pool (clients: from clients; upstream; peers: to the other "
            "replicas, summed) and state (busy, idle; clients: open)",
            ["pool", "state"],
            registry=r,
        )
        self.connections_queued = Gauge(
            "gym_mcp_bridge_connections_queued",
            "Requests waiting for a connection of a bounded pool (queue depth), by pool",
            ["pool"],
            registry=r,
        )
        self.connections_limit = Gauge(
            "gym_mcp_bridge_connections_limit",
            "The bound of each pool; clients: client connections kept open at once",
            ["pool"],
            registry=r,
        )
        self.accept_paused = Gauge(
            "gym_mcp_bridge_accept_paused",
            "1 while accepting is paused at the client connection limit (connections wait in the listen queue)",
            registry=r,
        )
        self.accept_failures = Gauge(
            "gym_mcp_bridge_accept_failures",
            "accept() failures since start (EMFILE and the like; each logged, the connections left queued)",
            registry=r,
        )
        ProcessCollector(registry=r)
        self._connection_sources: dict[str, Callable[[], Mapping[str, Any]]] = {}
        r.register(_WaitHistogram(self._connection_sources))

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

    def watch_clients(self, report: Callable[[], Mapping[str, Any]]) -> None:
        """Read the client connections from ``report`` (``bridge.http.accept.client_connections``)."""
        self._connection_sources["clients"] = report
        self.connections.labels("clients", "open").set_function(lambda: report()["open"])
        self.connections_limit.labels("clients").set_function(lambda: report()["limit"])
        self.accept_paused.set_function(lambda: int(bool(report()["accept_paused"])))
        self.accept_failures.set_function(lambda: report()["accept_failures"])

    def watch_pool(self, pool: str, report: Callable[[], Mapping[str, int]]) -> None:
        """Read a bounded pool's connections from ``report`` (busy, idle, queued, limit)."""
        self._connection_sources[pool] = report
        self.connections.labels(pool, "busy").set_function(lambda: report()["busy"])
        self.connections.labels(pool, "idle").set_function(lambda: report()["idle"])
        self.connections_queued.labels(pool).set_function(lambda: report()["queued"])
        self.connections_limit.labels(pool).set_function(lambda: report()["limit"])

    def connection_report(self) -> dict[str, dict[str, Any]]:
        """Every watched source's figures now, by pool (``/healthz``; the wait buckets left out)."""
        return {
            pool: {key: value for key, value in report().items() if key != "wait_counts"}
            for pool, report in self._connection_sources.items()
        }

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _WaitHistogram(Collector):
    """``gym_mcp_bridge_connection_wait_seconds{pool}``: the requests that waited for a connection of
    a bounded pool and for how long, read from each pool's counts (``wait_counts``, ``wait_seconds``)
    when scraped."""

    def __init__(self, sources: Mapping[str, Callable[[], Mapping[str, Any]]]) -> None:
        self.sources = sources

    def describe(self) -> list[HistogramMetricFamily]:
        return [self._family()]

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(
            "gym_mcp_bridge_connection_wait_seconds",
            "Requests that waited for a connection of a bounded pool (upstream, peers; the queue), by "
            "seconds waited; never counted against tool_timeout_s / verify_timeout_s",
            labels=["pool"],
        )

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = self._family()
        for pool, report in self.sources.items():
            figures = report()
            counts = figures.get("wait_counts")
            if counts is None:
                continue
            running, buckets = 0, []
            for bound, count in zip((*map(str, WAIT_BUCKETS), "+Inf"), counts, strict=True):
                running += count
                buckets.append((bound, running))
            family.add_metric([pool], buckets, float(figures.get("wait_seconds", 0.0)))
        yield family


class _ByFailureKind(Collector):
    """``gym_mcp_bridge_refusals_total{failure_kind}``: the rejections counted by their Gym failure
    kind (``bridge.failures.failure_kind`` of each reason), summed when scraped."""

    def __init__(self, rejections: Counter) -> None:
        self.rejections = rejections

    def describe(self) -> list[CounterMetricFamily]:
        return [self._family()]

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(
            "gym_mcp_bridge_refusals",
            "The rejections by failure kind, in NeMo Gym's shared vocabulary (nemo_gym.failure_kinds) or "
            "gym_mcp_bridge:<kind>",
            labels=["failure_kind"],
        )

    def collect(self) -> Iterator[CounterMetricFamily]:
        totals: dict[str, float] = {}
        for metric in self.rejections.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    kind = failures.failure_kind(sample.labels["reason"])
                    totals[kind] = totals.get(kind, 0.0) + sample.value
        family = self._family()
        for kind, value in sorted(totals.items()):
            family.add_metric([kind], value)
        yield family
