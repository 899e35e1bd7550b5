"""The cached environment that runs Verifiers (``tests/interop/verifiers_rollout.py``).

verifiers 0.4.0 pins ``mcp==2.0.0`` and the bridge needs ``mcp>=2.3``, so it gets its own venv:
``.cache/verifiers-env`` (Python 3.12), ``verifiers-requirements.txt`` (every package pinned)
installed with uv from PyPI, reused while a stamp (interpreter, requirements' hash) is unchanged.

Not pinned from here: Verifiers' ``null`` harness is a PEP 723 script whose dependencies
(``openai``, ``mcp==2.0.0``, ``httpx``, ``httpx2``, ``tenacity``, ``certifi``) Verifiers resolves
itself at first use with ``uv sync --script <script> --no-config`` into uv's cache; neither
``UV_CONSTRAINT``/``UV_OVERRIDE`` nor ``--exclude-newer`` changed that resolution here, so the
versions it got are reported by ``verifiers_rollout.py`` (``harness_packages``) instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.fixtures.bridges import uv

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / ".cache" / "verifiers-env"
REQUIREMENTS = Path(__file__).resolve().parent / "verifiers-requirements.txt"
STAMP = TARGET / ".verifiers-env-stamp"


def ensure_verifiers_env() -> Path:
    """The Verifiers environment's ``python`` (built or reused)."""
    found = subprocess.run(
        [str(ROOT / "scripts" / "find-python.sh"), "3.12"], capture_output=True, text=True, check=False
    )
    assert found.returncode == 0, f"no Python 3.12 for the Verifiers environment: {found.stderr}"
    python = found.stdout.strip()
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    stamp = f"{python} {digest}"
    if STAMP.exists() and STAMP.read_text().strip() == stamp:
        return TARGET / "bin" / "python"
    shutil.rmtree(TARGET, ignore_errors=True)
    for command in (
        [uv(), "venv", "-q", "--python", python, str(TARGET)],
        [uv(), "pip", "install", "-q", "--python", str(TARGET / "bin" / "python"),
         "-r", str(REQUIREMENTS)],
        [str(TARGET / "bin" / "python"), "-c", "import verifiers.v1.tasksets.nemo_gym"],
    ):  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, (command, result.stderr[-4000:])
    STAMP.write_text(stamp + "\n")
    return TARGET / "bin" / "python"


def runner_env(api_key_var: str) -> dict[str, str]:
    """Environment of the Verifiers process: ``uv`` on PATH (Verifiers would otherwise
    ``pip install --user uv``), this directory importable (taskset ``verifiers_gym_http``), no
    platform run (``PRIME_RUNS_MODE=disabled``), and a key for the stub model endpoint."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON", "PRIME_"))}
    return {
        **keep,
        "PATH": f"{Path(uv()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(Path(__file__).resolve().parent),
        "PYTHONUNBUFFERED": "1",
        "PRIME_RUNS_MODE": "disabled",
        api_key_var: "stub-key",
    }
