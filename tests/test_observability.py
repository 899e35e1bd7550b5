"""Tracing and the audit log, against a real bridge process and a real Gym upstream.

The bridge runs with ``OTEL_TRACES_EXPORTER=console`` (the SDK's own console exporter, configured
by the standard variables alone): every finished span is printed as JSON in its log, which the test
collects. The upstream is the fault fixture (Gym's counter), which records every ``traceparent``
header it receives, so propagation is checked on the upstream's side of the wire.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.bridges import HEADER, BridgeProcess, counter_row, running_bridge, upstream_url
from tests.fixtures.fault_texts import TRACEPARENTS_PATH
from tests.fixtures.helpers import FAULT_SPEC, MCP_HEADERS, fault_env, seed, tools_row

TRACE_A = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_B = "0af7651916cd43dd8448eb211c80319c"
PARENT = "00f067aa0ba902b7"


def spans_in(log: str) -> list[dict[str, Any]]:
    """The JSON spans the console exporter printed into a log."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := log.find('{\n    "name"', at)) >= 0:
        value, end = decoder.raw_decode(log, at)
        found.append(value)
        at = end
    return found


def hexid(value: str | None) -> str | None:
    return value[2:] if value else None


@pytest.fixture(scope="module")
def traced(log_dir: Path) -> Any:
    env = fault_env(
        OTEL_TRACES_EXPORTER="console", OTEL_BSP_SCHEDULE_DELAY="100", OTEL_SERVICE_NAME="bridge-test"
    )
    with running_bridge(log_dir, "--resources-server", FAULT_SPEC, **env) as bridge:
        yield bridge


def test_spans_form_one_tree_from_the_callers_trace_to_the_upstream(traced: BridgeProcess) -> None:
    token = seed(traced, counter_row(3))
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "get_counter_value", "arguments": {}},
    }
    header = {HEADER: token, "traceparent": f"00-{TRACE_A}-{PARENT}-01"}
    assert (
        httpx.post(f"{traced.url}/mcp", json=call, headers={**MCP_HEADERS, **header}, timeout=30).status_code
        == 200
    )
    in_meta = {**call, "params": {**call["params"], "_meta": {"traceparent": f"00-{TRACE_B}-{PARENT}-01"}}}
    assert (
        httpx.post(
            f"{traced.url}/mcp", json=in_meta, headers={**MCP_HEADERS, HEADER: token}, timeout=30
        ).status_code
        == 200
    )
    rest = httpx.post(f"{traced.url}/increment_counter", json={"count": 1}, headers=header, timeout=30)
    assert rest.status_code == 200
    verdict = httpx.post(
        f"{traced.url}/verify", json={"trajectory": {"format": "recorded"}}, headers=header, timeout=60
    )
    assert verdict.status_code == 200
    sent = httpx.get(f"{upstream_url(traced)}{TRACEPARENTS_PATH}", timeout=10).json()
    traced.stop()  # flushes the batch processor

    spans = spans_in(traced.log())
    by_id = {hexid(s["context"]["span_id"]): s for s in spans}
    in_a = [s for s in spans if hexid(s["context"]["trace_id"]) == TRACE_A]
    mcp = next(s for s in in_a if s["name"] == "mcp tools/call")
    assert hexid(mcp["parent_id"]) == PARENT and mcp["kind"] == "SpanKind.SERVER"
    assert mcp["attributes"]["gym.tool"] == "get_counter_value"
    assert mcp["attributes"]["gym.tool.canonical"] == "get_counter_value"
    assert mcp["attributes"]["gym.outcome"] == "ok" and len(mcp["attributes"]["gym.session"]) == 16
    upstream = next(s for s in in_a if s["name"] == "upstream POST /get_counter_value")
    assert hexid(upstream["parent_id"]) == hexid(mcp["context"]["span_id"])
    assert (
        upstream["kind"] == "SpanKind.CLIENT" and upstream["attributes"]["http.response.status_code"] == 200
    )
    # the upstream received the client span's context: a Gym server that traces joins this trace
    assert f"00-{TRACE_A}-{hexid(upstream['context']['span_id'])}-01" in sent

    in_b = [s for s in spans if hexid(s["context"]["trace_id"]) == TRACE_B]
    assert {s["name"] for s in in_b} == {"mcp tools/call", "upstream POST /get_counter_value"}, "from _meta"

    rest_span = next(s for s in in_a if s["name"] == "POST /increment_counter")
    assert hexid(rest_span["parent_id"]) == PARENT and rest_span["attributes"]["gym.outcome"] == "ok"
    verify = next(s for s in in_a if s["name"] == "verify")
    assert by_id[hexid(verify["parent_id"])]["name"] == "POST /verify"
    assert any(
        s["name"] == "upstream POST /verify" and hexid(s["parent_id"]) == hexid(verify["context"]["span_id"])
        for s in in_a
    )

    everything = json.dumps(spans)
    assert token not in everything and '"count"' not in everything, "no tokens or arguments in spans"


def test_without_otel_settings_no_span_is_made(log_dir: Path) -> None:
    bridge = BridgeProcess(args=["--resources-server", FAULT_SPEC], env=fault_env()).start(
        log_dir, timeout=240
    )
    try:
        token = seed(bridge, counter_row(0))
        header = {HEADER: token, "traceparent": f"00-{TRACE_A}-{PARENT}-01"}
        httpx.post(f"{bridge.url}/get_counter_value", json={}, headers=header, timeout=30)
        sent = httpx.get(f"{upstream_url(bridge)}{TRACEPARENTS_PATH}", timeout=10).json()
    finally:
        bridge.stop()
    assert spans_in(bridge.log()) == [] and "tracing on" not in bridge.log()
    assert sent == [], "with tracing off the bridge forwards no trace context of its own"


def test_the_audit_log_has_one_line_per_call_and_arguments_only_when_asked(
    log_dir: Path, tmp_path: Path
) -> None:
    plain, full = tmp_path / "audit.jsonl", tmp_path / "audit-args.jsonl"
    bridges = [
        BridgeProcess(args=["--resources-server", FAULT_SPEC, "--audit-log", str(plain)], env=fault_env()),
        BridgeProcess(
            args=["--resources-server", FAULT_SPEC, "--audit-log", str(full), "--audit-log-arguments"],
            env=fault_env(),
        ),
    ]
    try:
        for bridge in bridges:
            bridge.start(log_dir, timeout=240)
            token = seed(bridge, tools_row("increment_counter", "fail_500"))
            for count in (2, 5, 2**64 + 1):  # the last past 64 bits: written exact, as Gym read it
                httpx.post(
                    f"{bridge.url}/increment_counter",
                    json={"count": count},
                    headers={HEADER: token},
                    timeout=30,
                )
            httpx.post(f"{bridge.url}/fail_500", json={}, headers={HEADER: token}, timeout=30)
    finally:
        for bridge in bridges:
            bridge.stop()
    lines = [json.loads(line) for line in plain.read_text().splitlines()]
    assert [(x["tool"], x["outcome"], x["transport"]) for x in lines] == [
        ("increment_counter", "ok", "http"),
        ("increment_counter", "ok", "http"),
        ("increment_counter", "ok", "http"),
        ("fail_500", "upstream_error", "http"),
    ]
    assert all("arguments" not in x and len(x["session"]) == 16 and x["latency_ms"] > 0 for x in lines)
    assert len({x["session"] for x in lines}) == 1 and token not in plain.read_text()
    with_args = [json.loads(line) for line in full.read_text().splitlines()]
    assert [x.get("arguments") for x in with_args] == [{"count": 2}, {"count": 5}, {"count": 2**64 + 1}, {}]
