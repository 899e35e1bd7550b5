"""Pinned npm packages for the interop tests, installed idempotently under ``.cache/interop/``.

Each package set is a folder of ``tests/interop/`` with a ``package.json`` and its
``package-lock.json``. ``ensure_packages(name)`` copies both (plus any scripts in the folder) to
``.cache/interop/<name>/`` and runs ``npm ci`` there with the download cache in ``.cache/npm``,
only when the lock file changed since the last successful install (a stamp file holds its hash).
Everything comes from the npm registry by package name; nothing is downloaded from elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = Path(__file__).resolve().parent
CACHE = ROOT / ".cache"
NPM_CACHE = CACHE / "npm"
INSTALLS = CACHE / "interop"


@dataclass(frozen=True)
class Installed:
    name: str
    path: Path  # the folder holding node_modules and the copied scripts
    seconds: float  # time spent installing now (0.0 when the install was already current)

    def bin(self, command: str) -> Path:
        return self.path / "node_modules" / ".bin" / command


def node_available() -> tuple[bool, str]:
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return False, f"{tool} is not on PATH (Node.js >= 18 with npm is needed for this test)"
    return True, ""


def ensure_packages(name: str, timeout_s: float = 600) -> Installed:
    """Install ``tests/interop/<name>`` (pinned by its lock file) under ``.cache/interop/<name>``."""
    ok, why = node_available()
    assert ok, why
    source = SOURCES / name
    target = INSTALLS / name
    target.mkdir(parents=True, exist_ok=True)
    lock = (source / "package-lock.json").read_bytes()
    digest = hashlib.sha256(lock + (source / "package.json").read_bytes()).hexdigest()
    for item in source.iterdir():  # scripts are refreshed on every call, node_modules only on change
        if item.is_file():
            shutil.copy2(item, target / item.name)
    stamp = target / ".installed"
    if stamp.exists() and stamp.read_text() == digest and (target / "node_modules").is_dir():
        return Installed(name, target, 0.0)
    started = time.monotonic()
    env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false"}
    result = subprocess.run(
        ["npm", "ci", "--no-audit", "--prefer-offline", "--cache", str(NPM_CACHE)],
        cwd=target,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"npm ci for tests/interop/{name} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    stamp.write_text(digest)
    return Installed(name, target, time.monotonic() - started)


def installed_cli(
    name: str, command: str, version: str, env: dict[str, str] | None = None, last_line: bool = False
) -> str:
    """The path of ``command`` from package set ``name`` (installed if needed), once its
    ``--version`` prints exactly ``version`` (or, with ``last_line``, ends with that line); prints
    how long the install took."""
    installed = ensure_packages(name)
    binary = installed.bin(command)
    result = subprocess.run(
        [str(binary), "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    printed = result.stdout.strip()
    assert (printed.splitlines()[-1] if last_line else printed) == version, result.stdout
    print(f"\n{name} {version}: npm ci took {installed.seconds:.1f}s (0 = already installed)")
    return str(binary)
