"""Per-environment Python environments for managed upstreams, as Gym's own runner builds them.

Gym gives every resources server an environment of its own, built from the server directory's
``requirements.txt`` (minus the line that installs nemo-gym itself from ``../..``), or from its
``pyproject.toml`` dependencies when it has no ``requirements.txt``, with ``ray`` and
``openai`` pinned to the parent's versions. The bridge does the same, layered on the base Gym
environment (``gym_python``) instead of a full copy of it:

- ``locate`` finds the server's directory for a spec (bundled name, ``resources_servers.<env>...:Class``,
  or a config YAML whose instance names a bundled env) by asking the base interpreter where
  ``resources_servers`` lives;
- an environment whose ``requirements.txt`` adds nothing runs on the base interpreter itself;
- otherwise ``ensure`` builds, once, a venv on the base interpreter under
  ``<cache>/<env>-<hash>/`` (hash of the requirement lines and the base's identity) whose
  site-packages holds what uv installs from those lines and a ``.pth`` that adds the base's
  site-packages after it: the server's own pins win, everything else comes from the base. Builds
  are serialized by a lock file, marked complete only when uv succeeded, and reused afterwards.

A failed build raises ``EnvBuildError`` whose text is one line naming the package uv could not
install.
"""

from __future__ import annotations

import asyncio
import difflib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from bridge.settings import PROJECT_ROOT

log = logging.getLogger("gym_mcp_bridge.gym_envs")

DEFAULT_CACHE = PROJECT_ROOT / ".cache" / "gym-envs"
COMPLETE_MARKER = ".bridge-env-complete"
PINNED_FROM_BASE = ("openai", "ray")  # Gym's head-server deps: children match the parent exactly
_YAML_ENV = re.compile(r"^\s+resources_servers:\s*\n\s+([A-Za-z0-9_.-]+):", re.MULTILINE)
_REQUIREMENT_NAME = re.compile(r"^\s*(?:-e\s+)?([A-Za-z0-9][A-Za-z0-9._-]*)")
_QUERY = """
import importlib.metadata as m, importlib.util as u, json, sysconfig
spec = u.find_spec("resources_servers")
roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
installed = {d.metadata["Name"]: d.version for d in m.distributions() if d.metadata["Name"]}
print(json.dumps({"roots": roots, "purelib": sysconfig.get_paths()["purelib"],
                  "versions": {n: version(n) for n in ("nemo-gym", "openai", "ray")},
                  "installed": installed}))
"""


class EnvBuildError(Exception):
    """The server's own environment could not be built; str(exc) is one line naming the package."""


@dataclass(frozen=True, slots=True)
class GymEnv:
    """Where and how a managed upstream runs: its interpreter, its directory (working directory and
    ``PYTHONPATH``), and the requirement lines its own environment was built from (empty: base)."""

    python: Path
    directory: Path | None
    requirements: tuple[str, ...] = ()

    def child_env(self, environ: dict[str, str]) -> dict[str, str]:
        """The server's process environment as Gym's runner gives it: its venv activated (``python``
        on ``PATH`` is its interpreter) and ``uv`` on ``PATH`` (some servers build venvs of their own)."""
        bin_dir = str(self.python.parent)
        uv = find_uv()
        extra = [bin_dir] + ([str(Path(uv).parent)] if uv and str(Path(uv).parent) != bin_dir else [])
        path = os.pathsep.join([*extra, environ.get("PATH", os.defpath)])
        added = {"PATH": path}
        if (self.python.parent.parent / "pyvenv.cfg").is_file():
            added["VIRTUAL_ENV"] = str(self.python.parent.parent)
        return {**environ, **added}


@dataclass(frozen=True, slots=True)
class BaseInfo:
    roots: list[Path]  # the portions of the resources_servers namespace package, in import order
    purelib: Path
    versions: dict[str, str | None]
    installed: dict[str, str]  # every distribution of the base, name -> version


async def query_base(gym_python: Path) -> BaseInfo:
    proc = await asyncio.create_subprocess_exec(
        str(gym_python),
        "-c",
        _QUERY,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        raise EnvBuildError(f"{gym_python} cannot be queried: {lines[-1] if lines else proc.returncode}")
    data = json.loads(out)
    return BaseInfo(
        roots=[Path(root) for root in data["roots"]],
        purelib=Path(data["purelib"]),
        versions=dict(data["versions"]),
        installed=dict(data.get("installed", {})),
    )


def locate(spec: str, roots: list[Path]) -> Path | None:
    """The server directory a spec runs in (in the first ``resources_servers`` portion that has it),
    or None when it is not a bundled environment's."""
    if not roots:
        return None
    if spec.endswith((".yaml", ".yml")) or re.search(r"\.ya?ml:[^/]+$", spec):
        path = Path(spec.rsplit(":", 1)[0] if not spec.endswith((".yaml", ".yml")) else spec)
        if path.parent.name == "configs" and (path.parent.parent / "app.py").is_file():
            return path.parent.parent.resolve()
        try:
            found = _YAML_ENV.search(path.read_text())
        except OSError:
            return None
        name = found.group(1) if found else None
    elif ":" in spec:
        parts = spec.partition(":")[0].split(".")
        name = parts[1] if len(parts) > 2 and parts[0] == "resources_servers" else None
    else:
        name = spec
    if not name or "/" in name or name.startswith("."):
        return None
    return next((root / name for root in roots if (root / name).is_dir()), None)


def requirement_lines(directory: Path) -> list[str]:
    """The server's own requirements as Gym installs them: ``requirements.txt`` without lines that
    reach ``../..`` (nemo-gym itself), comments and blanks; or, without one, ``pyproject.toml``'s
    ``project.dependencies`` without nemo-gym (Gym installs those with ``--no-sources``: from the
    registry, whatever ``tool.uv.sources`` says)."""
    path = directory / "requirements.txt"
    if not path.is_file():
        return _pyproject_dependencies(directory / "pyproject.toml")
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#") and "../.." not in line:
            lines.append(line)
    return lines


def _pyproject_dependencies(path: Path) -> list[str]:
    if not path.is_file():
        return []
    project = tomllib.loads(path.read_text()).get("project", {})
    dependencies = project.get("dependencies", []) if isinstance(project, dict) else []
    return [
        d
        for d in dependencies
        if isinstance(d, str)
        and re.split(r"[\s\[<>=!~;@]", d, maxsplit=1)[0].lower().replace("_", "-") != "nemo-gym"
    ]


def env_dir(cache: Path, name: str, lines: list[str], base: BaseInfo, gym_python: Path) -> Path:
    identity = json.dumps(
        {
            "lines": lines,
            "python": str(gym_python.resolve()),
            "purelib": str(base.purelib),
            "constraints": "base-installed, else with nemo-gym",
            **base.versions,
        },
        sort_keys=True,
    )
    return cache / f"{name}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"


def find_uv() -> str | None:
    for candidate in (
        os.environ.get("UV"),
        shutil.which("uv"),
        str(PROJECT_ROOT / ".cache" / "uv-venv" / "bin" / "uv"),
        str(Path(sys.prefix) / "bin" / "uv"),
    ):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def failed_package(lines: list[str], uv_output: str) -> str:
    """One line: which requirement uv could not install, and uv's own reason."""
    text = uv_output.lower()
    names = [(m.group(1), line) for line in lines if (m := _REQUIREMENT_NAME.match(line))]
    culprit = next((line for name, line in names if name.lower() in text), None)
    if culprit is None:
        culprit = next((line for line in lines if line.lower() in text), None)
    detail = [
        s.strip()
        for s in uv_output.splitlines()
        if s.strip()
        and not s.lstrip().startswith(("Using Python", "Resolved", "Prepared", "Installed", "Audited"))
    ]
    reason = next(
        (d for d in reversed(detail) if "fatal:" in d or "Could not resolve host" in d),
        next(
            (d for d in detail if d.lower().startswith(("error", "\u00d7", "cause"))),
            detail[0] if detail else "",
        ),
    )
    reason = re.sub("^(error|cause|\u00d7)\\s*:?\\s*", "", reason, flags=re.IGNORECASE)
    what = f"cannot install {culprit!r}" if culprit else "cannot install its requirements"
    return f"{what}: {reason}"[:400]


async def _run(argv: list[str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode(errors="replace")


async def build(target: Path, name: str, lines: list[str], base: BaseInfo, gym_python: Path) -> None:
    """Build the layered venv at ``target`` (under its lock); a no-op when a complete one is there."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
        if (target / COMPLETE_MARKER).is_file():
            return
        uv = find_uv()
        if uv is None:
            raise EnvBuildError(
                f"{name} needs its own environment ({', '.join(lines)}) but uv is not installed"
            )
        shutil.rmtree(target, ignore_errors=True)
        started = time.monotonic()
        log.info(
            "building the environment of %s (first use; reused afterwards): %s -> %s",
            name,
            " ".join(lines),
            target,
        )
        code, out = await _run([uv, "venv", "-q", "--python", str(gym_python), str(target)])
        if code != 0:
            raise EnvBuildError(
                f"cannot create a venv for {name}: {out.strip().splitlines()[-1] if out else code}"
            )
        purelib = next((target / "lib").glob("python3*/site-packages"))
        (purelib / "_gym_base_env.pth").write_text(f"import site; site.addsitedir({str(base.purelib)!r})\n")
        # Gym resolves a server's requirements together with nemo-gym's own: keep every package of the
        # base at its version (a newer antlr4 under math-verify breaks omegaconf's parser, say). When
        # that cannot resolve, do what Gym's runner does: nemo-gym itself resolved with the
        # requirements, into this layer, so every package it shadows comes with its dependents
        # (a newer protobuf under the base's wandb would not import), with Gym's explicit pins; last,
        # the requirements alone with those pins.
        pins = [f"{n}=={v}" for n, v in base.installed.items() if n.lower() != "nemo-gym"]
        explicit = [f"{n}=={v}" for n, v in base.versions.items() if n in PINNED_FROM_BASE and v]
        gym = base.versions.get("nemo-gym")
        attempts = [
            (lines, pins),
            ([f"nemo-gym=={gym}", *lines] if gym else lines, explicit),
            (lines, explicit),
        ]
        for number, (requirements, constraints) in enumerate(attempts):
            (target / "requirements.txt").write_text("\n".join(requirements) + "\n")
            (target / "constraints.txt").write_text("\n".join(constraints) + "\n")
            argv = [uv, "pip", "install", "--python", str(target / "bin" / "python")]
            argv += ["-r", str(target / "requirements.txt"), "-c", str(target / "constraints.txt")]
            code, out = await _run(argv)
            if code == 0 or number == len(attempts) - 1:
                break
            log.warning(
                "%s: its requirements do not resolve %s; trying %s",
                name,
                ("with the base's versions", "with nemo-gym")[number],
                ("them with nemo-gym, as Gym's runner does", "them with Gym's pins only")[number],
            )
        if code != 0:
            shutil.rmtree(target, ignore_errors=True)
            raise EnvBuildError(f"the environment of {name} cannot be built: {failed_package(lines, out)}")
        (target / COMPLETE_MARKER).write_text(
            json.dumps({"requirements": lines, "built_s": time.monotonic() - started})
        )
        log.info("built the environment of %s in %.1fs", name, time.monotonic() - started)


def bundled(roots: list[Path]) -> list[str]:
    """The names of the environments bundled with Gym (``resources_servers/<name>/app.py``)."""
    found = {path.parent.name for root in roots for path in root.glob("*/app.py")}
    return sorted(name for name in found if not name.startswith(("_", ".")))


def unknown_name(spec: str, roots: list[Path]) -> str | None:
    """Why ``spec`` names no environment, with the close matches to choose from, when it is a bare
    name (not ``module:Class`` nor a config YAML) that no ``resources_servers`` portion bundles."""
    if not roots or ":" in spec or spec.endswith((".yaml", ".yml")):
        return None
    names = bundled(roots)
    if spec in names:
        return None
    close = difflib.get_close_matches(spec, names, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return (
        f"no bundled Gym environment named {spec!r}; {hint}--resources-server takes the name of one of the "
        f"{len(names)} bundled here (docs/compatibility.md lists which run), module:Class, or config.yaml[:instance]"
    )


async def ensure(spec: str, gym_python: Path, cache: Path | None = None) -> GymEnv:
    """The interpreter and directory to run ``spec`` with, building its own environment on first use."""
    base = await query_base(gym_python)
    unknown = unknown_name(spec, base.roots)
    if unknown is not None:
        raise EnvBuildError(unknown)
    directory = locate(spec, base.roots)
    if directory is None:
        return GymEnv(python=gym_python, directory=None)
    lines = requirement_lines(directory)
    if not lines:
        return GymEnv(python=gym_python, directory=directory)
    target = env_dir(cache or DEFAULT_CACHE, directory.name, lines, base, gym_python)
    if not (target / COMPLETE_MARKER).is_file():
        await build(target, directory.name, lines, base, gym_python)
    return GymEnv(python=target / "bin" / "python", directory=directory, requirements=tuple(lines))
