"""The Gym environments the project builds (``make setup``: ``.gym-env``, nemo-gym 0.4.0; ``make gym-env
NEMO_GYM_VERSION=0.7.0``: ``.gym-env-0.7.0``), found and built on demand for the tests and the
collector benchmark that need nemo-gym 0.7.0. The building is ``scripts/setup-gym-env.sh``'s."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GYM07_ENV = ROOT / ".gym-env-0.7.0"
GYM07_CHECK = "import nemo_gym.mcp_auto_exposure, resources_servers.example_session_state_mgmt.app"


def gym_version(python: Path) -> str:
    """The nemo-gym version installed for ``python`` ("" when it has none)."""
    return subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('nemo-gym'))"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def uv() -> str:
    local = ROOT / ".cache" / "uv-venv" / "bin" / "uv"
    return str(local) if local.exists() else "uv"


def imports(python: Path, code: str) -> bool:
    if not python.exists():
        return False
    return subprocess.run([str(python), "-c", code], capture_output=True, timeout=300).returncode == 0


def ensure_gym07_env(log: Path) -> str | None:
    """Build ``.gym-env-0.7.0`` with the project's one builder (``make gym-env NEMO_GYM_VERSION=0.7.0``:
    ``scripts/setup-gym-env.sh``, stamp-cached; it states the Python >= 3.13.14 question and installs
    on this machine's 3.13.0 as if it were 3.13.14). None when ready, else why not."""
    python = GYM07_ENV / "bin" / "python"
    env = {**os.environ, "UV": uv(), "NEMO_GYM_VERSION": "0.7.0"}
    try:
        with log.open("ab") as out:
            subprocess.run(
                [str(ROOT / "scripts" / "setup-gym-env.sh"), str(GYM07_ENV)],
                stdout=out, stderr=subprocess.STDOUT, env=env, check=True, timeout=900,
            )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not build the nemo-gym 0.7.0 environment ({exc}); see {log}"
    if not imports(python, GYM07_CHECK):
        return f"nemo-gym 0.7.0 does not import in {GYM07_ENV}; see {log}"
    return None
