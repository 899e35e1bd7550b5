"""The shell blocks of README.md, docs/*.md and examples/**/README.md, run on the road they document.

Every fenced ``bash`` / ``sh`` / ``shell`` / ``console`` block carries, on the line before its fence,
either ``<!-- run: ID -->`` (run here by the test that owns ID, ``RUNS``) or ``<!-- not run: REASON -->``
(what this machine lacks: a model, a cluster, a hosted CLI login, ...). A block with neither fails
``test_every_shell_block_is_run_or_says_why``.

How a block is run: as one bash script from the project root, with ``.venv/bin`` first on ``PATH``
(the blocks themselves name ``.venv/bin/...``: test_documented_executables_are_reachable_as_written).
The documented port (8000, or the block's own 80xx) becomes a free port (in the text and in the
expected output), so that a deployment on this machine is never met. In a ``console`` block, ``$ `` starts a command (``\\``
continues it) and the lines after it up to the next command are its expected output, compared exactly
after that substitution and with session tokens (``eyJ...``) written as ``<token>``: the sample
outputs in the docs are what a run prints. ``make TARGET`` lines are checked against the Makefile's
targets rather than rerun (``make setup`` built this checkout).

Roads: the bridge from a fresh ``make setup`` (its CLI: ``serve``, the ``curl`` rollout with a key,
``client-config``, ``show-config``), Gym's launcher (marker ``launcher``: nemo-gym 0.7.0's ``gym env
start`` and ``ng_collect_rollouts``, with a stub model as ``<model URL>``), and Docker Compose (marker
``docker``: the image the suite builds, tagged as compose's) and NeMo Evaluator (marker ``evaluator``:
examples/evaluator/README.md in the Evaluator's environment). Every relative link in those files names
a file that exists; every setting is in docs/reference.md's table; what the blocks write is ignored by
git; a bridge a block leaves running has a port of its own and is waited for.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.bridges import ROOT, BridgeProcess, free_port, running_bridge

SHELL = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(\s*)```(\S*)")
MARK = re.compile(r"<!--\s*(run|not run):\s*(.+?)\s*-->")
GENERATED_KEY = re.compile(r"\b[0-9a-f]{40,}\b")
TOKEN = re.compile(r"eyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+")
LINK = re.compile(r"\]\(([^)\s]+)\)")
KEY = "docs-test-key-" + "k" * 40


def doc_files() -> list[Path]:
    examples = sorted((ROOT / "examples").rglob("README.md"))
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *examples]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    mark: tuple[str, str] | None  # ("run", ID) or ("not run", reason)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        indent, lang = opened.groups()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```"))
        if lang in SHELL:
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            mark = MARK.search(before)
            body = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end])
            found.append(Block(path, i + 1, lang, body, (mark[1], mark[2]) if mark else None))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for path in doc_files() for block in blocks_of(path)]


def marked(run_id: str) -> list[Block]:
    found = [b for b in all_blocks() if b.mark == ("run", run_id)]
    assert found, f"no block is marked <!-- run: {run_id} -->"
    return found


# -- running a block ---------------------------------------------------------------------------------


DOC_PORT = re.compile(r"(?<=[:\s=])80\d\d\b")


def on_port(text: str, port: int) -> str:
    """``text`` with the one port it documents (8000, or a port of its own such as 8010) as ``port``."""
    documented = set(DOC_PORT.findall(text))
    assert len(documented) <= 1, f"a block run on one port documents several: {sorted(documented)}"
    return DOC_PORT.sub(str(port), text)


@dataclass
class Command:
    text: str
    expected: list[str]


def console_commands(text: str) -> list[Command]:
    commands: list[Command] = []
    continued = False
    for line in text.splitlines():
        if continued:
            commands[-1].text += "\n" + line
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            commands.append(Command(line[2:], []))
            continued = line.endswith("\\")
        elif line.startswith("# ") or not line.strip():
            continue
        else:
            assert commands, f"output before any command: {line}"
            commands[-1].expected.append(line)
    return commands


def normalized(text: str) -> list[str]:
    """Lines to compare: tokens as ``<token>``; blank lines and ``# `` comments (in a console block
    they are the doc's) left out on both sides."""
    return [
        GENERATED_KEY.sub("<key>", TOKEN.sub("<token>", line.rstrip()))
        for line in text.splitlines()
        if line.strip() and not line.startswith("# ")
    ]


def bash_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GYM_MCP_BRIDGE_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **(extra or {})}


def workdir(tmp: Path) -> Path:
    """A folder standing for the project root, where a block may write its files: the checkout's
    ``.venv`` and ``examples`` linked in."""
    for name in (".venv", ".gym-env", ".gym-env-0.7.0", "examples", ".cache"):
        if (ROOT / name).exists() and not (tmp / name).exists():
            (tmp / name).symlink_to(ROOT / name)
    return tmp


def run_script(
    script: str, env: dict[str, str], cwd: Path = ROOT, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """bash -e over ``script`` in its own process group, its output in files (a server it leaves
    running keeps no pipe open); whatever it left running is stopped after."""
    temp = Path(tempfile.gettempdir())
    out, err = temp / f"docs-{uuid.uuid4().hex}.out", temp / f"docs-{uuid.uuid4().hex}.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            ["bash", "-eo", "pipefail", "-c", script],
            cwd=cwd,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            proc.wait(timeout)
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                time.sleep(1 if sig == signal.SIGTERM else 0)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text())
    out.unlink()
    err.unlink()
    return done


def run_block(block: Block, port: int, env: dict[str, str], cwd: Path = ROOT, timeout: float = 300) -> None:
    """Run ``block`` (console: compare every command's output with the documented one)."""
    text = on_port(block.text, port)
    if block.lang != "console":
        script = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("make "))
        done = run_script(script, env, cwd, timeout)
        assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return
    commands = console_commands(text)
    marker = f"@@docs-{uuid.uuid4().hex}@@"
    script = "\n".join(f"printf '\\n{marker}\\n'\n{c.text}" for c in commands)
    done = run_script(script, env, cwd, timeout)
    outputs = done.stdout.split(f"{marker}\n")[1:]
    assert done.returncode == 0 and len(outputs) == len(commands), (
        f"{block.where}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    for command, output in zip(commands, outputs, strict=True):
        assert normalized(output) == normalized("\n".join(command.expected)), (
            f"{block.where}: `{command.text}` printed\n{output}\nthe doc shows\n"
            + "\n".join(command.expected)
        )


# -- every block is run or says why; links; make targets ---------------------------------------------

RUNS = {
    "make": "make lines: targets checked against the Makefile (test_make_lines_name_real_targets)",
    "quickstart": "examples/quickstart.py against `make run`'s bridge, output as documented",
    "by-hand": "serve with a key, then the curl rollout, output as documented",
    "client-config": "client-config against a bridge that requires a key",
    "show-config": "show-config of a bridge configured by GYM_MCP_BRIDGE_* here",
    "serve": "gym-mcp-bridge serve with the block's flags, until ready",
    "kustomize": "the environment overlay rendered by kubectl kustomize",
    "replay": "the replay recipe of docs/scoring.md, every reward as recorded",
    "gym-launcher": "Gym's launcher and collector (marker launcher)",
    "compose": "docker compose (marker docker)",
    "evaluator": "examples/evaluator/README.md in NeMo Evaluator's environment, one shell (marker evaluator)",
}
# blocks another test file runs as written: run id -> that test
ELSEWHERE = {
    "kube-rotation": "tests/test_kubernetes.py::test_the_documented_rotations_write_what_the_bridge_reads",
}


def test_every_shell_block_is_run_or_says_why() -> None:
    unmarked = [b.where for b in all_blocks() if b.mark is None]
    assert unmarked == [], f"shell blocks with neither <!-- run: ID --> nor <!-- not run: why -->: {unmarked}"
    ids = {b.mark[1] for b in all_blocks() if b.mark and b.mark[0] == "run"}
    owned = set(RUNS) | set(ELSEWHERE)
    assert ids <= owned, f"blocks marked with a run id no test owns: {ids - owned}"
    assert owned <= ids, f"run ids no block carries: {owned - ids}"
    for test in ELSEWHERE.values():
        file, name = test.split("::")
        assert f"def {name}(" in (ROOT / file).read_text(), test
    reasons = [b for b in all_blocks() if b.mark and b.mark[0] == "not run"]
    assert all(len(b.mark[1]) > 10 for b in reasons if b.mark), "a not-run reason says what is missing"


def test_relative_links_name_existing_files() -> None:
    broken = []
    for path in doc_files():
        for target in LINK.findall(path.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            file = (path.parent / target.split("#", 1)[0]).resolve()
            if not file.exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert broken == []


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return {m for line in text.splitlines() for m in re.findall(r"^([a-z][\w-]*)\s*:(?!=)", line)}


def test_make_lines_name_real_targets() -> None:
    targets = makefile_targets()
    seen = []
    for block in all_blocks():
        for line in block.text.splitlines():
            found = re.match(r"\s*(?:\$ )?make\s+(.*)", line)
            if found is None:
                continue
            words = [w for w in shlex.split(found[1].split("#", 1)[0]) if "=" not in w]
            assert words and words[0] in targets, f"{block.where}: `{line.strip()}` names no Makefile target"
            seen.append(words[0])
    assert {"run", "test", "gym-env"} <= set(seen)
    make_only = marked("make")
    for block in make_only:
        lines = [ln for ln in block.text.splitlines() if ln.strip()]
        assert all(ln.lstrip().startswith("make ") for ln in lines), block.where
    # the README's first command serves the embedded default environment; its second runs the suite
    assert re.search(r"^run: setup\n\t\.venv/bin/gym-mcp-bridge serve \$\(ARGS\)$", _makefile(), re.M)
    assert re.search(r"^test: lint\n\t\.venv/bin/pytest", _makefile(), re.M)


def _makefile() -> str:
    return (ROOT / "Makefile").read_text()


def commands_of(block: Block) -> list[str]:
    """The block's commands as a reader types them: a console block's ``$ `` lines (continuations
    joined), any other block's lines; comments left out."""
    if block.lang == "console":
        return [c.text.replace("\\\n", " ") for c in console_commands(block.text)]
    return logical_lines(block.text)


# a command word: at the start, after a shell operator or an opening quote (a command given to a
# shell, as --serve 'exec ...'), past VAR=value assignments and `exec`
COMMAND_WORD = re.compile(
    r"(?:^|[;&|(`'\"]|\$\()\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:exec\s+)?([^\s;&|()'\"]+)"
)
NOT_ON_PATH = {"gym-mcp-bridge", "python", "python3", "pip", "pip3"}  # make setup puts them in .venv/bin


def test_documented_executables_are_reachable_as_written() -> None:
    """From a fresh clone after ``make setup`` nothing is on PATH but what the system had: the bridge's
    CLI and Python are ``.venv/bin/...`` (inside a container, ``docker ... exec <service>`` runs the
    image's own)."""
    bare = []
    for block in all_blocks():
        for command in commands_of(block):
            if re.match(r"\s*docker\b", command):
                continue  # `docker compose exec bridge gym-mcp-bridge ...`: the container's PATH
            words = set(COMMAND_WORD.findall(command))
            if words & NOT_ON_PATH:
                bare.append(f"{block.where}: {command.strip()[:100]}")
    assert bare == [], "commands a fresh clone does not have on PATH (use .venv/bin/...):\n" + "\n".join(bare)


def background_bridges() -> list[tuple[Block, int | None, str]]:
    """(block, port, command) of every ``gym-mcp-bridge serve ... &`` the docs start and keep running."""
    found = []
    for block in all_blocks():
        exported = re.search(r"GYM_MCP_BRIDGE_PORT=(\d+)", block.text)
        for command in commands_of(block):
            if "gym-mcp-bridge serve" in command and command.rstrip().endswith("&"):
                port = re.search(r"--port\s+(\d+)", command) or exported
                found.append((block, int(port[1]) if port else None, command))
    return found


def test_bridges_started_in_the_background_have_ports_of_their_own_and_are_waited_for() -> None:
    """The README's ``make run`` keeps serving :8000 while its reader goes on: a block that starts a
    bridge and goes on names a port no other doc uses, and waits for that bridge's /readyz."""
    started = background_bridges()
    assert len(started) >= 4, started
    owner: dict[int, Path] = {}
    for block, port, command in started:
        assert port is not None and port != 8000, (
            f"{block.where}: `{command}` serves on :8000, as `make run` does"
        )
        assert owner.setdefault(port, block.path) == block.path, (
            f"port {port}: {owner[port]} and {block.where}"
        )
        after = block.text[block.text.index(command.split(" &")[0][-30:]) :]
        assert f"localhost:{port}/readyz" in after, f"{block.where}: nothing waits for the bridge on :{port}"


def created_paths(block: Block) -> list[str]:
    """Files and folders a block writes, relative to where it runs: redirect targets, ``mkdir``,
    ``--out``/``CODEX_HOME``/state-dir values, Gym's ``output_jsonl_fpath``; a folder ends in ``/``."""
    found: list[str] = []
    for command in commands_of(block):
        found += re.findall(r"(?<![0-9&])>{1,2}\s*([\w.$/-]+)", command)
        found += [f"{d}/" for d in re.findall(r"mkdir\s+(?:-p\s+)?([\w./-]+)", command)]
        found += [f"{d}/" for d in re.findall(r"(?:_DIR|_HOME|--out)[= ](?:\$PWD/)?([\w./-]+)", command)]
        found += re.findall(r"output_jsonl_fpath=([\w./-]+)", command)
    return [p for p in found if not p.startswith(("/", "$", "-")) and p != "/dev/null"]


def test_files_the_documented_commands_write_are_ignored_by_git() -> None:
    """Keys, tokens and session state the blocks write in the project root (``api-key``, ``key.txt``,
    ``seed.json``, ``state/``, ``.gemini/``, ...) are never picked up by ``git add .``."""
    paths = {p for block in all_blocks() for p in created_paths(block)}
    assert {"api-key", "key.txt", "seed.json", "state/", ".gemini/settings.json"} <= paths, paths
    probe = sorted(p + "x" if p.endswith("/") else p for p in paths)  # a file inside each folder
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", *probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    ignored = set(done.stdout.split())
    assert [p for p in probe if p not in ignored] == [], "written by the docs, not in .gitignore"


def test_every_setting_is_in_the_reference_settings_table() -> None:
    """docs/reference.md's Configuration table names every field of the settings model, by its flag,
    in its first column (the model read now: settings added later fail here until documented)."""
    from bridge.settings import Settings

    text = (ROOT / "docs" / "reference.md").read_text()
    table = text[text.index("## Configuration") :].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    flags = set(re.findall(r"`(--[a-z0-9-]+)`", "".join(first_cells)))
    wanted = {"--" + name.replace("_", "-") for name in Settings.model_fields}
    assert sorted(wanted - flags) == [], "settings missing from docs/reference.md's table"
    assert sorted(flags - wanted) == [], "rows for settings the model does not have"


# -- the bridge's own road: serve, the curl rollout, client-config, show-config ------------------------


@pytest.fixture(scope="module")
def keyed_bridge(log_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    """`make run`'s bridge (the embedded default environment) with a REST API key, as compose runs it."""
    key_file = tmp_path_factory.mktemp("docs-key") / "api-key"
    key_file.write_text(KEY)
    with running_bridge(log_dir, "--api-key-file", str(key_file), timeout=120) as bridge:
        yield bridge


def test_the_readme_lists_every_client_config_client() -> None:
    """The README names exactly the harnesses ``client-config --client`` takes."""
    done = run_script("gym-mcp-bridge client-config --help", bash_env())
    choices = set(re.search(r"--client \{([^}]+)\}", done.stdout)[1].split(","))  # type: ignore[index]
    text = (ROOT / "README.md").read_text()
    listed = re.search(r"`--client` takes (.+?);", text, re.S)
    assert listed is not None, "the README's list of client-config clients"
    assert set(re.findall(r"`([a-z-]+)`", listed[1])) == choices


def test_quickstart_output_is_what_a_run_prints(counter_bridge: BridgeProcess, tmp_path: Path) -> None:
    for block in marked("quickstart"):
        run_block(
            block,
            counter_bridge.port,
            bash_env({"GYM_MCP_BRIDGE_URL": counter_bridge.url}),
            workdir(tmp_path),
        )


def test_rollout_by_hand(tmp_path: Path) -> None:
    """The block starts its own bridge with a key (on a free port) and plays one rollout with curl."""
    for block in marked("by-hand"):
        run_block(block, free_port(), bash_env(), cwd=workdir(tmp_path), timeout=240)


def test_a_by_hand_bridge_whose_port_is_taken_says_so(counter_bridge: BridgeProcess, tmp_path: Path) -> None:
    """The by-hand block with its port already served by a bridge without a key (the reader's `make
    run`, say): the block's own bridge stops at once with one line and exit 2, and the block's first
    check (a request without the key is refused: 401) shows that another server answers there, before
    any rollout step."""
    commands = console_commands(on_port(marked("by-hand")[0].text, counter_bridge.port))
    check = next(i for i, c in enumerate(commands) if c.expected == ["401"])
    marker = f"@@docs-{uuid.uuid4().hex}@@"
    script = "\n".join(f"printf '\\n{marker}\\n'\n{c.text}" for c in commands[: check + 1])
    done = run_script(
        f'{script}\nwait $! || echo "bridge exit $?"', bash_env(), workdir(tmp_path), timeout=120
    )
    outputs = done.stdout.split(f"{marker}\n")[1:]
    failure = [line for line in done.stderr.splitlines() if line.startswith("gym-mcp-bridge:")]
    assert failure == [
        f"gym-mcp-bridge: port {counter_bridge.port} on 127.0.0.1 is already in use; pass --port or stop the "
        "other process"
    ], done.stderr
    assert "Traceback" not in done.stderr and "bridge exit 2" in done.stdout, done.stdout + done.stderr
    assert normalized(outputs[check]) != ["401"], outputs  # the keyless bridge took the request


def test_client_config_blocks(keyed_bridge: BridgeProcess, tmp_path: Path) -> None:
    env = bash_env({"GYM_MCP_BRIDGE_API_KEY": KEY, "ROOT": str(ROOT)})
    for block in marked("client-config"):
        run_block(block, keyed_bridge.port, env, cwd=workdir(tmp_path))
    # --public-url: the MCP URL is the one the client reaches (a tunnel, an ingress), not the seed's
    done = run_script(
        f"gym-mcp-bridge client-config --client json --bridge-url {keyed_bridge.url}"
        " --public-url http://localhost:18000/",
        env,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["url"] == "http://localhost:18000/mcp"
    # without the key the same command is refused in one line: the key is what made it pass
    done = run_script(
        f"gym-mcp-bridge client-config --client json --bridge-url {keyed_bridge.url}", bash_env()
    )
    assert done.returncode == 2 and "401" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_show_config_blocks(tmp_path: Path) -> None:
    """A bridge with a state directory generates its key there; show-config prints it (compared as
    ``<key>``: the doc cannot know it) and the URLs."""
    for block in marked("show-config"):
        run_block(block, free_port(), bash_env(), cwd=workdir(tmp_path), timeout=240)
        key = (tmp_path / "state" / "api_key").read_text().strip()
        assert len(key) >= 32


def test_kustomize_blocks(tmp_path: Path) -> None:
    """The environment overlay of examples/kubernetes/README.md, written where it says, rendered by
    kubectl's own kustomize (no cluster): the pods serve the environment it names."""
    assert shutil.which("kubectl"), "kubectl (its kustomize renders the overlay offline) is not on PATH"
    text = (ROOT / "examples" / "kubernetes" / "README.md").read_text()
    section = text[text.index("## Choosing the environment") :]
    overlay = section[section.index("```yaml\n") + 8 :].split("```", 1)[0]
    (tmp_path / "my-env").mkdir()
    (tmp_path / "my-env" / "kustomization.yaml").write_text(overlay)
    for block in marked("kustomize"):
        run_block(block, free_port(), bash_env(), cwd=workdir(tmp_path))


def logical_lines(text: str) -> list[str]:
    """The block's commands: ``\\``-continued lines joined, comments and ``make`` lines left out."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [
        line.split(" #")[0].strip()
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "make "))
    ]


def test_serve_blocks(gym07_python: Path, tmp_path: Path) -> None:
    """Each ``gym-mcp-bridge serve`` command of these blocks, as written (its port given through
    GYM_MCP_BRIDGE_PORT when it names none): it starts, answers /readyz with 200, and is stopped."""
    served = 0
    for block in marked("serve"):
        for command in logical_lines(block.text):
            assert "gym-mcp-bridge serve" in command, f"{block.where}: {command}"
            port = free_port()
            script = (
                f"{command.removesuffix('&').strip()} &\n"
                f"for i in $(seq 240); do curl -sf localhost:{port}/readyz >/dev/null && exit 0; sleep 1; done; exit 1"
            )
            done = run_script(script, bash_env({"GYM_MCP_BRIDGE_PORT": str(port)}), workdir(tmp_path))
            assert done.returncode == 0, f"{block.where}: `{command}` not ready\n{done.stdout}\n{done.stderr}"
            served += 1
    assert served >= 3


def test_replay_blocks(tmp_path: Path) -> None:
    """The replay recipe: each replay exits 0 only when every reward equals the recorded one."""
    for block in marked("replay"):
        text = block.text
        for port in sorted(set(re.findall(r"\b80\d\d\b", text))):
            text = re.sub(rf"\b{port}\b", str(free_port()), text)
        done = run_script(text, bash_env(), workdir(tmp_path), timeout=600)
        assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"


# -- Gym's launcher --------------------------------------------------------------------------------------

LAUNCHER_TIMEOUT_S = 1500


@pytest.mark.launcher
@pytest.mark.timeout(LAUNCHER_TIMEOUT_S + 300)
def test_gym_launcher_recipe(gym07_python: Path, tmp_path: Path) -> None:
    """The examples/gym recipe as written, with three things a test must add (tests/interop/gym_launcher.py
    says why): a stub model at ``<model URL>``, the head server on a free port (both commands), and the
    launcher's venvs, caches, results and Hydra outputs outside the checkout (the venvs where the
    launcher tests keep them). Every shipped row scores 1.0 (the stub replays each row's solution)."""
    from tests.interop.gym_launcher import READY, Launcher, counter_cases, policy, uv_bin
    from tests.interop.stubs.gym_model_stub import StubPolicyEndpoint

    blocks = marked("gym-launcher")
    assert len({b.text for b in blocks}) == 1, "the launcher recipe is given the same way everywhere"
    block = blocks[0]
    lines = [ln for ln in block.text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    source = next(ln.split("#")[0].strip() for ln in lines if ln.startswith(". examples/gym/env.sh"))
    start = next(ln for ln in lines if ln.startswith("gym env start "))
    collect = next(ln for ln in lines if ln.startswith("ng_collect_rollouts "))
    rows_file = ROOT / re.search(r"\+input_jsonl_fpath=(\S+)", collect)[1]  # type: ignore[index]
    rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
    head = free_port()
    uv_cache = subprocess.run(
        [str(uv_bin() / "uv"), "cache", "dir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    out = tmp_path / "rollouts.jsonl"
    keys = f" +head_server.host=127.0.0.1 +head_server.port={head} hydra.run.dir={tmp_path / 'outputs'}"
    launcher_keys = (
        f" ++uv_venv_dir={ROOT / '.cache' / 'gym-launcher' / 'venvs-0.7.0'} ++cache_dir={tmp_path / 'cache'}"
        f" ++uv_cache_dir={uv_cache} ++results_dir={tmp_path / 'results'}"
    )
    cases = counter_cases(rows, range(len(rows)))[:-1]  # every row with its solution (no control)
    log = tmp_path / "launcher.log"
    env = bash_env()
    with StubPolicyEndpoint() as stub:
        model = dict(
            zip(
                ("<model URL>", "<key>", "<name>"),
                (p.split("=", 1)[1] for p in policy(stub, cases)),
                strict=True,
            )
        )
        for placeholder, value in model.items():
            start = start.replace(placeholder, value)
        start = start.rstrip().removesuffix("&").rstrip()
        proc = subprocess.Popen(
            ["bash", "-c", f"{source} && exec {start}{keys}{launcher_keys}"],
            cwd=ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        launcher = Launcher(gym07_python, "gym env start", tmp_path, proc=proc)
        try:
            deadline = time.monotonic() + LAUNCHER_TIMEOUT_S
            while READY.search(log.read_text(errors="replace")) is None:
                assert proc.poll() is None, log.read_text(errors="replace")[-6000:]
                assert time.monotonic() < deadline, log.read_text(errors="replace")[-6000:]
                time.sleep(1)
            collect = re.sub(r"\+output_jsonl_fpath=\S+", f"+output_jsonl_fpath={out}", collect)
            done = run_script(f"{source}\n{collect}{keys}", env, timeout=900)
            assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        finally:
            launcher.stop()
    rollouts = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert sorted(int(r["_ng_task_index"]) for r in rollouts) == list(range(len(rows)))
    assert [float(r["reward"]) for r in rollouts] == [1.0] * len(rows), [r.get("reward") for r in rollouts]
    assert all(r["_bridge"]["recorded_tool_calls"] == 2 for r in rollouts)


# -- Docker Compose ---------------------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.timeout(1500)
def test_compose_blocks(docker_engine: Any, docker_image: str, tmp_path: Path) -> None:
    """The compose blocks from a fresh clone, with the image the suite built tagged as compose's
    (no registry here) and a project name and host port of their own (tests/test_compose.py says why)."""
    from tests.fixtures.containers import compose_command

    clone = tmp_path / "gym-mcp-bridge"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    (clone / ".venv").symlink_to(ROOT / ".venv")  # `make setup` in the clone: its .venv/bin/python
    port = free_port()
    project = f"gmbdocs{uuid.uuid4().hex[:8]}"
    compose = " ".join(shlex.quote(part) for part in compose_command())
    env = bash_env(
        {
            "COMPOSE_PROJECT_NAME": project,
            "GYM_MCP_BRIDGE_IMAGE": docker_image,
            "PYTHON_BASE": "python:3.12-slim",
            "GYM_MCP_BRIDGE_PUBLISH_HOST": "127.0.0.1",
            "GYM_MCP_BRIDGE_PUBLISH_PORT": str(port),
        }
    )
    try:
        for block in marked("compose"):
            as_here = Block(
                block.path, block.line, block.lang, block.text.replace("docker compose", compose), block.mark
            )
            run_block(as_here, port, env, cwd=clone, timeout=900)
    finally:
        run_script(
            f"{compose} --profile replicas --profile quickstart down -v --timeout 30 || true", env, clone
        )


# -- NeMo Evaluator ----------------------------------------------------------------------------------------


@pytest.mark.evaluator
@pytest.mark.timeout(1200)
def test_evaluator_blocks(tmp_path: Path) -> None:
    """examples/evaluator/README.md as a reader runs it: its first block (the Evaluator's environment,
    built by ``make evaluator-env``'s script) then each later block, in one shell, the bridge on a free
    port in place of the documented one. Each exits 0; the rows are scored (Gym's 422 on nemo-gym
    0.4.0, as against Gym alone) and the summary printed; the key never shows."""
    setup = subprocess.run(
        [str(ROOT / "scripts" / "setup-evaluator-env.sh")], capture_output=True, text=True, timeout=900
    )
    assert setup.returncode == 0, setup.stderr[-4000:]
    blocks = marked("evaluator")
    assert all(b.path == ROOT / "examples" / "evaluator" / "README.md" for b in blocks)
    first = "\n".join(ln for ln in blocks[0].text.splitlines() if not ln.lstrip().startswith("make "))
    assert "make evaluator-env" in blocks[0].text and len(blocks) >= 3
    work = workdir(tmp_path)
    for block in blocks[1:]:
        text = on_port(block.text, free_port())
        done = run_script(f"{first}\n{text}", bash_env(), work, timeout=600)
        assert done.returncode == 0, (
            f"{block.where}: exit {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
        )
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        summaries = [line["summary"] for line in lines if "summary" in line]
        if "--data" in text:
            assert summaries and summaries[0]["rows"] == 5, done.stdout
        if "--list-tools" in text:
            assert any("tools" in line for line in lines), done.stdout
        if (work / "key.txt").exists():
            key = (work / "key.txt").read_text().strip()
            assert key not in done.stdout + done.stderr


RUNNERS: dict[str, Callable[..., None]] = {
    "quickstart": test_quickstart_output_is_what_a_run_prints,
    "by-hand": test_rollout_by_hand,
    "client-config": test_client_config_blocks,
    "show-config": test_show_config_blocks,
    "serve": test_serve_blocks,
    "replay": test_replay_blocks,
    "kustomize": test_kustomize_blocks,
    "gym-launcher": test_gym_launcher_recipe,
    "compose": test_compose_blocks,
    "evaluator": test_evaluator_blocks,
}
