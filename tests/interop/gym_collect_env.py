"""The cached environment that runs Gym's collection command (``ng_collect_rollouts``).

``.gym-env`` holds nemo-gym 0.4.0 with the resource-server import slice only; Gym's CLI module
(``nemo_gym.cli.eval``) also imports ``devtools``, ``mlflow`` and ``datasets``. This builds
``.cache/gym-collect-env``: the same ``scripts/setup-gym-env.sh`` build (same nemo-gym version,
same interpreter as ``.gym-env``) plus ``gym-collect-requirements.txt``, from PyPI with uv, and
reuses it while a stamp (the Gym env's stamp and the requirements' hash) is unchanged.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from tests.fixtures.bridges import uv

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / ".cache" / "gym-collect-env"
REQUIREMENTS = Path(__file__).resolve().parent / "gym-collect-requirements.txt"
STAMP = TARGET / ".gym-collect-stamp"


def ensure_collect_env() -> Path:
    """The collect environment's ``bin`` directory (built or reused)."""
    gym_stamp = (ROOT / ".gym-env" / ".gym-env-stamp").read_text().strip()  # version, reqs hash, python
    python = gym_stamp.split()[-1]
    stamp = f"{gym_stamp} {hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]}"
    if STAMP.exists() and STAMP.read_text().strip() == stamp:
        return TARGET / "bin"
    env = {**os.environ, "UV": uv(), "NEMO_GYM_VERSION": gym_stamp.split()[0]}
    for command in (
        [str(ROOT / "scripts" / "setup-gym-env.sh"), str(TARGET), python],
        [uv(), "pip", "install", "-q", "--python", str(TARGET / "bin" / "python"), "-r", str(REQUIREMENTS)],
        [str(TARGET / "bin" / "python"), "-c", "import nemo_gym.cli.eval"],
    ):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, (command, result.stderr[-4000:])
    STAMP.write_text(stamp + "\n")
    return TARGET / "bin"
