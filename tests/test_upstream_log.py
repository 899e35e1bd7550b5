"""The managed upstream's own output in the bridge's log, at the bridge's default log level
(bridge/upstream/child.py): an error report at WARNING, the rest at INFO, every line ``[upstream]``.

The error is a real one of Gym's bundled ``example_session_state_mgmt`` (nemo-gym 0.4.0): its
``/verify`` rebuilds the request as its response model from ``model_dump()``, and a response whose
``text.format`` is a JSON schema (a harness that asked for structured output) dumps the schema
under the field name ``schema_``, which the model then refuses -- a pydantic ValidationError raised
inside the handler, printed by Gym's exception middleware as a traceback, answered 500 with the
error's text. The bridge passes that answer on (never a reward) and its log shows the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.bridges import HEADER, SECRET, BridgeProcess, counter_row
from tests.fixtures.helpers import bridge_log_problems, gym_response

API_KEY = "upstream-log-api-key-" + "a" * 24


def structured_output_response() -> dict[str, Any]:
    """A Responses object of a rollout that asked for a JSON-schema answer (``text.format``)."""
    return {
        **gym_response(),
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}},
    }


def test_an_upstream_error_reaches_the_bridge_log_at_the_default_level(log_dir: Path) -> None:
    bridge = BridgeProcess(args=[], env={"GYM_MCP_BRIDGE_API_KEY": API_KEY}).start(log_dir)
    try:
        auth = {"authorization": f"Bearer {API_KEY}"}
        seeded = httpx.post(f"{bridge.url}/seed_session", json=counter_row(3), headers=auth, timeout=30)
        assert seeded.status_code == 200, seeded.text
        token = seeded.json()["mcp"]["headers"][HEADER]
        body = {**counter_row(3, expected=3), "response": structured_output_response()}
        failed = httpx.post(f"{bridge.url}/verify", json=body, headers={**auth, HEADER: token}, timeout=60)
        assert failed.status_code == 500, failed.text  # the upstream's own answer, passed through
        assert "reward" not in failed.text and "validation errors for BaseVerifyResponse" in failed.text

        upstream_pid = bridge.health()["upstream"]["pid"]
        environ = Path(f"/proc/{upstream_pid}/environ").read_bytes().decode(errors="replace")
    finally:
        bridge.stop()
    log = bridge.log()
    relayed = [line for line in log.splitlines() if " gym_mcp_bridge.upstream: [upstream] " in line]
    warnings = [line for line in relayed if " WARNING " in line]
    infos = [line for line in relayed if " INFO " in line]
    # the report whole at WARNING: Gym's header, the tracebacks, the exception and its message lines
    for part in (
        "Caught an exception printed above in example_session_state_mgmt",
        "Exception Group Traceback (most recent call last):",
        "| pydantic_core._pydantic_core.ValidationError: 3 validation errors for BaseVerifyResponse",
        "The above exception was the direct cause of the following exception:",
        "\tTraceback (most recent call last):".lstrip("\t"),
        'app.py", line 99, in verify',
        "response.text.format.ResponseFormatTextJSONSchemaConfig.schema",
        "repr(e): 3 validation errors for BaseVerifyResponse",
    ):
        assert any(part in line for line in warnings), (part, log[-6000:])
    assert not any("ValidationError" in line or "Traceback" in line for line in infos), infos
    # the upstream's start at INFO (seen at the default level, not as a warning)
    assert any("upstream_boot: serving" in line for line in infos), log[-3000:]
    assert bridge_log_problems(log) == [], "the bridge itself logged a traceback"
    # the bridge's keys are not in the upstream's environment (what it prints reaches this log)
    assert API_KEY not in environ and SECRET not in environ
    assert API_KEY not in log and SECRET not in log and token not in log
