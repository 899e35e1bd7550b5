"""Same inputs, same image: the Gym environment installs from a hashed lock, uv from a hashed pin.

Static (no engine, seconds): every lock in scripts/gym-env/ pins every package with its hashes and
nemo-gym itself, names the hashed build backend beside it, was made from its input as it is now (the sha256 its header records) and satisfies
the input's specifiers; uv is pinned by hash; the Dockerfile, the Makefile and setup-gym-env.sh
install with --require-hashes; the Dockerfile's default io.nemo-gym.lock label is the default lock's
sha256. setup-gym-env.sh itself, run for real: a version with no lock and a lock older than its
input are refused with the command that fixes them; the stamp holds the lock's hash; a file whose
hash the lock does not list is refused.

Container (marker ``docker``, real Docker engine, the session image of tests/conftest.py): the
image's label names its lock, its Gym venv holds exactly what the lock pins, and a second, cold
build of the ``gym-env`` stage (no cache, every wheel from PyPI again) installs the same packages
and versions. One version is rebuilt (0.4.0, the default): 0.7.0 goes through the same script and
Dockerfile lines, and its image is checked against its own lock by tests/test_containers_gym07.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.fixtures.bridges import uv
from tests.fixtures.containers import TIMINGS, Engine, build_image, gym_env_packages

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
LOCK_DIR = SCRIPTS / "gym-env"
SUPPORTED = ("0.4.0", "0.7.0")
LOCKS = sorted(LOCK_DIR.glob("nemo-gym-*.lock.txt"))
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def entries(text: str) -> list[tuple[str, list[str]]]:
    """(requirement, its hashes) for each requirement of a hashed requirements file."""
    found = []
    for line in text.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        requirement = line.split(" --hash=")[0].strip()
        found.append((requirement, HASH.findall(line)))
    return found


def version_of(lock: Path) -> str:
    return lock.name.removeprefix("nemo-gym-").removesuffix(".lock.txt")


def test_every_supported_version_has_a_lock() -> None:
    assert {version_of(lock) for lock in LOCKS} >= set(SUPPORTED), LOCKS


@pytest.mark.parametrize("lock", LOCKS, ids=version_of)
def test_every_lock_line_is_pinned_and_hashed(lock: Path) -> None:
    pinned = entries(lock.read_text())
    assert len(pinned) > 50, "the import slice resolves to some 80-100 packages"
    for requirement, hashes in pinned:
        req = Requirement(requirement)
        assert len(req.specifier) == 1 and next(iter(req.specifier)).operator == "==", requirement
        assert hashes, f"{requirement} has no hash"
    # nemo-gym itself, pinned with its own hashes (installed --no-deps beside the slice)
    assert pinned[0][0] == f"nemo-gym=={version_of(lock)}", pinned[0]
    # resolved for every platform (a universal lock keeps platform markers; one made for this
    # machine alone would have dropped the Windows-only packages)
    assert any("sys_platform == 'win32'" in r for r, _ in pinned), "not a universal resolution"


@pytest.mark.parametrize("lock", LOCKS, ids=version_of)
def test_the_sdist_build_backend_is_pinned_and_hashed_beside_the_lock(lock: Path) -> None:
    """nemo-gym-VERSION.build.txt (uv --build-constraints): setuptools and wheel, hashed, the file
    the lock's header names by its sha256."""
    build = lock.with_name(f"nemo-gym-{version_of(lock)}.build.txt")
    pinned = dict(entries(build.read_text()))
    assert {Requirement(r).name for r in pinned} >= {"setuptools", "wheel"}, pinned
    assert all(hashes and "==" in r for r, hashes in pinned.items()), pinned
    assert f"# build: scripts/gym-env/{build.name} sha256:{sha256(build)}" in lock.read_text().splitlines()


@pytest.mark.parametrize("lock", LOCKS, ids=version_of)
def test_the_lock_was_made_from_its_input_as_it_is(lock: Path) -> None:
    header = re.search(r"^# input: (\S+) sha256:([0-9a-f]{64})$", lock.read_text(), re.M)
    assert header, f"{lock.name} does not name its input"
    source = ROOT / header[1]
    assert sha256(source) == header[2], (
        f"{header[1]} changed since {lock.name} was made: make gym-lock NEMO_GYM_VERSION={version_of(lock)}"
    )
    pins = {canonicalize_name(Requirement(r).name): Requirement(r) for r, _ in entries(lock.read_text())}
    for line in source.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        wanted = Requirement(line)
        pinned = pins.get(canonicalize_name(wanted.name))
        assert pinned is not None, f"{wanted.name} of {source.name} is not in {lock.name}"
        version = Version(next(iter(pinned.specifier)).version)
        assert wanted.specifier.contains(version, prereleases=True), (str(wanted), str(pinned))


def test_uv_is_pinned_by_hash_and_installed_with_require_hashes() -> None:
    pinned = entries((SCRIPTS / "uv-requirements.txt").read_text())
    assert len(pinned) == 1 and re.fullmatch(r"uv==\d+\.\d+\.\d+", pinned[0][0]), pinned
    # every platform's wheel (18 for uv 0.13.9: manylinux/musllinux x86_64, aarch64, ..., macOS, Windows)
    assert len(pinned[0][1]) >= 10, pinned[0][1]
    dockerfile = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    uv_stage = dockerfile.split(" AS uv", 1)[1].split("\nFROM ", 1)[0]
    assert "COPY scripts/uv-requirements.txt /tmp/uv-requirements.txt" in uv_stage
    assert re.search(r"pip install [^\n]*--require-hashes[^\n]*-r /tmp/uv-requirements\.txt", uv_stage)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(
        r"uv-venv/bin/pip install [^\n]*--require-hashes[^\n]*-r scripts/uv-requirements\.txt", makefile
    )
    for text in (dockerfile, makefile):
        assert not re.search(r"install[^\n]*\buv==", text), "uv comes from scripts/uv-requirements.txt only"


def test_the_gym_env_installs_the_lock_with_require_hashes() -> None:
    setup = (SCRIPTS / "setup-gym-env.sh").read_text().replace("\\\n", " ")
    installs = [line for line in setup.splitlines() if re.search(r'"\$uv" pip install', line)]
    assert len(installs) == 1, installs
    assert re.search(
        r'--no-deps --require-hashes --compile-bytecode\s+--build-constraints "\$build" -r "\$lock"',
        installs[0],
    ), installs
    dockerfile = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    assert re.search(
        r"COPY [^\n]*scripts/gym-env/nemo-gym-\$\{NEMO_GYM_VERSION\}\.lock\.tx\[t\]\s+"
        r"scripts/gym-env/nemo-gym-\$\{NEMO_GYM_VERSION\}\.build\.tx\[t\] /opt/gym-setup/gym-env/",
        dockerfile,
    )
    assert "setup-gym-env.sh /opt/gym-env" in dockerfile


def test_the_dockerfile_labels_the_image_with_its_lock() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    default_version = re.search(r"^ARG NEMO_GYM_VERSION=(\S+)$", dockerfile, re.M)
    default_sha = re.search(r"^ARG NEMO_GYM_LOCK_SHA256=([0-9a-f]{64})$", dockerfile, re.M)
    assert default_version and default_sha, "NEMO_GYM_VERSION and NEMO_GYM_LOCK_SHA256 have defaults"
    lock = LOCK_DIR / f"nemo-gym-{default_version[1]}.lock.txt"
    assert default_sha[1] == sha256(lock), f"run make gym-lock NEMO_GYM_VERSION={default_version[1]}"
    final = dockerfile.rsplit("\nFROM ", 1)[1]
    assert re.search(r'^LABEL .*io\.nemo-gym\.lock="\$\{NEMO_GYM_LOCK_SHA256\}"', final, re.M), final
    gym_stage = dockerfile.split(" AS gym-env", 1)[1].split("\nFROM ", 1)[0]
    assert "NEMO_GYM_LOCK_SHA256" in gym_stage, "the Gym stage checks the label against the lock"


# ---------------------------------------------------------------- setup-gym-env.sh, run


def python312() -> str:
    out = subprocess.run([str(SCRIPTS / "find-python.sh"), "3.12"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def scripts_copy(tmp_path: Path) -> Path:
    """A checkout's scripts/ (the builder, find-python.sh, the locks and inputs) under tmp_path."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name in ("setup-gym-env.sh", "find-python.sh"):
        shutil.copy2(SCRIPTS / name, scripts / name)
    shutil.copytree(LOCK_DIR, scripts / "gym-env")
    return scripts


def setup(scripts: Path, target: Path, version: str, *python: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NEMO_GYM_VERSION": version, "UV": uv()}
    return subprocess.run(
        [str(scripts / "setup-gym-env.sh"), str(target), *python],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def test_a_version_without_a_lock_is_refused_in_one_line(tmp_path: Path) -> None:
    done = setup(SCRIPTS, tmp_path / "env", "0.6.0")
    assert done.returncode == 1, done
    assert done.stderr.strip().splitlines() == [
        "setup-gym-env: no lock for nemo-gym 0.6.0 (scripts/gym-env/nemo-gym-0.6.0.lock.txt); "
        "make it with: make gym-lock NEMO_GYM_VERSION=0.6.0"
    ], done.stderr
    assert not (tmp_path / "env").exists()


def test_a_lock_older_than_its_input_is_refused(tmp_path: Path) -> None:
    scripts = scripts_copy(tmp_path)
    with (scripts / "gym-env" / "import-slice-0.4.in").open("a") as f:
        f.write("tqdm\n")
    done = setup(scripts, tmp_path / "env", "0.4.0", python312())
    assert done.returncode == 1, done
    assert "scripts/gym-env/import-slice-0.4.in changed since" in done.stderr, done.stderr
    assert "make gym-lock NEMO_GYM_VERSION=0.4.0" in done.stderr, done.stderr


def test_the_stamp_holds_the_locks_hash_and_unlisted_files_are_refused(tmp_path: Path) -> None:
    scripts, target, python = scripts_copy(tmp_path), tmp_path / "env", python312()
    lock = scripts / "gym-env" / "nemo-gym-0.4.0.lock.txt"
    # A target stamped with this version, lock and interpreter is left as it is.
    target.mkdir()
    (target / "kept").write_text("")
    (target / ".gym-env-stamp").write_text(f"0.4.0 {sha256(lock)} {python}\n")
    done = setup(scripts, target, "0.4.0", python)
    assert done.returncode == 0 and (target / "kept").exists(), done
    # Another lock (nemo-gym's hashes replaced: no file on PyPI has them) makes it rebuild, and the
    # install refuses the wheel whose hash the lock does not list, before anything is installed.
    header = lock.read_text().partition("nemo-gym==0.4.0")[0]
    lock.write_text(f"{header}nemo-gym==0.4.0 \\\n    --hash=sha256:{'0' * 64}\n")
    started = time.monotonic()
    done = setup(scripts, target, "0.4.0", python)
    assert done.returncode != 0, done
    assert "hash" in done.stderr.lower() and "nemo-gym" in done.stderr, done.stderr[-2000:]
    assert not (target / "kept").exists() and not (target / ".gym-env-stamp").exists()
    assert time.monotonic() - started < 120


# ---------------------------------------------------------------- two builds, one image


@pytest.mark.docker
@pytest.mark.timeout(2400)
def test_two_builds_of_one_commit_install_the_same_locked_packages(
    docker_engine: Engine, docker_image: str
) -> None:
    """The session image's label and Gym venv against its lock, then the ``gym-env`` stage built again
    cold (no cache: every wheel downloaded again) against both."""
    lock = LOCK_DIR / "nemo-gym-0.4.0.lock.txt"
    labels = docker_engine.client.images.get(docker_image).attrs["Config"]["Labels"]
    assert labels["io.nemo-gym.version"] == "0.4.0", labels
    assert labels["io.nemo-gym.lock"] == sha256(lock), labels

    installed, expected = gym_env_packages(docker_engine, docker_image)
    assert installed == expected, {"installed ^ lock": installed.items() ^ expected.items()}
    assert expected["nemo-gym"] == "0.4.0" and len(expected) > 50, expected

    tag = "localhost/gym-mcp-bridge:test-gym-env-rebuild"
    try:
        TIMINGS["gym_env_cold_rebuild_s"], _ = build_image(docker_engine, tag, target="gym-env", nocache=True)
        rebuilt, rebuilt_expected = gym_env_packages(docker_engine, tag)
    finally:
        try:
            docker_engine.client.images.remove(tag, force=True)
        except Exception as exc:  # the assertion below matters more than the cleanup
            print(f"could not remove {tag}: {exc}")
    assert rebuilt_expected == expected
    assert rebuilt == installed, {
        "first": installed.items() - rebuilt.items(),
        "second": rebuilt.items() - installed.items(),
    }
