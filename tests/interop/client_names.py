"""Shared bits of the ``capture_*_names.py`` scripts: where fixtures go and how they are written.

The fixtures (``tests/fixtures/client_names/<client>.json``) hold what real MCP clients showed the
model for an MCP tool; ``tests/test_naming_clients.py`` checks ``bridge.scoring.naming.resolve`` on them.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "client_names"
CAPTURED = "2026-12-01"


def bridge_env(source: Path | None) -> dict[str, str]:
    """Env for ``BridgeProcess`` to run the ``bridge`` package found in ``source`` (e.g. a
    ``git archive HEAD bridge`` extract) instead of the work tree's, which may be mid-edit."""
    if source is None:
        return {}
    gym = str(ROOT / ".gym-env" / "bin" / "python")
    return {"PYTHONSAFEPATH": "1", "PYTHONPATH": str(source.resolve()), "GYM_MCP_BRIDGE_GYM_PYTHON": gym}


def invocation(argv: list[str] | None) -> str:
    """The command line that ran the calling script, relative to the project root."""
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    args = sys.argv[1:] if argv is None else argv
    return shlex.join([".venv/bin/python", str(shown), *args])


def write_fixture(path: Path, header: dict[str, Any], cases: list[dict[str, Any]]) -> None:
    """The header indented, one case per line (the tool lists would otherwise dominate the file)."""
    head = json.dumps(header, indent=2)[:-2]  # drop the closing "\n}"
    body = ",\n".join("    " + json.dumps(case) for case in cases)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'{head},\n  "cases": [\n{body}\n  ]\n}}\n')
    json.loads(path.read_text())  # still valid JSON
