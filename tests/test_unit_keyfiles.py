"""Keys generated on first start into ``state_dir`` (bridge/commands/keyfiles.py) and
``gym-mcp-bridge show-config``, in-process and through the real CLI.

Expected behaviour: generated on first start (mode 0600, owned by the user the bridge
runs as), kept across restarts, explicit secrets (file or env) win, never written to logs; the
documented command prints the API key and the MCP URL.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.commands import keyfiles
from bridge.commands.cli import StartupError, build_parser, settings_from
from bridge.settings import Settings
from tests.fixtures.bridges import ROOT, free_port


def serve_settings(*argv: str) -> tuple[Settings, list[str]]:
    return settings_from(build_parser().parse_args(["serve", *argv]))


def test_first_start_generates_both_keys_0600_and_later_starts_keep_them(tmp_path: Path) -> None:
    settings, notes = serve_settings("--state-dir", str(tmp_path))
    for name in ("signing_key", "api_key"):
        path = tmp_path / name
        info = path.stat()
        assert stat.S_IMODE(info.st_mode) == 0o600, oct(info.st_mode)
        assert info.st_uid == os.getuid()
        assert len(path.read_text().strip()) == 64
    assert settings.secret_file == tmp_path / "signing_key"
    assert settings.api_key is not None
    assert settings.api_key.get_secret_value() == (tmp_path / "api_key").read_text().strip()
    assert settings.signing_keys() == ([(tmp_path / "signing_key").read_text().strip()], False)
    assert [n.split(":")[0] for n in notes] == ["signing key", "REST API key"]
    assert all("generated on this first start" in n for n in notes)
    assert "show-config" in notes[1]
    keys = [(tmp_path / n).read_text().strip() for n in ("signing_key", "api_key")]
    assert not any(k in n for k in keys for n in notes), "a key was put into a log line"

    again, notes = serve_settings("--state-dir", str(tmp_path))
    assert [(tmp_path / n).read_text().strip() for n in ("signing_key", "api_key")] == keys
    assert again.api_key is not None and again.api_key.get_secret_value() == keys[1]
    assert all("kept from an earlier start" in n for n in notes)


def test_explicit_keys_win_and_the_state_dir_is_not_touched(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("s" * 64 + "\n")
    settings, notes = serve_settings(
        "--state-dir", str(state), "--secret-file", str(secret), "--api-key", "explicit-key-" + "k" * 20
    )
    assert list(state.iterdir()) == []
    assert notes == []
    assert settings.secret_file == secret
    assert settings.api_key is not None and settings.api_key.get_secret_value().startswith("explicit-key-")

    api_file = tmp_path / "api"
    api_file.write_text("from-a-file-" + "a" * 20 + "\n")
    settings, notes = serve_settings("--state-dir", str(state), "--api-key-file", str(api_file))
    assert sorted(p.name for p in state.iterdir()) == ["signing_key"]  # only the key not given
    assert settings.api_key is not None and settings.api_key.get_secret_value() == "from-a-file-" + "a" * 20


def test_a_missing_state_dir_is_a_one_line_startup_error(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=r"state_dir .*missing is not a directory"):
        serve_settings("--state-dir", str(tmp_path / "missing"))


def test_state_dir_keys_are_never_generated_by_show_config(tmp_path: Path) -> None:
    _, files = keyfiles.use_state_dir(Settings(state_dir=tmp_path), generate=False)
    assert list(tmp_path.iterdir()) == []
    assert set(files) == {"signing_key", "api_key"}


def run_show_config(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GYM_MCP_BRIDGE_")}
    return subprocess.run(
        [sys.executable, "-m", "bridge", "show-config", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_show_config_prints_the_key_and_mcp_url(tmp_path: Path) -> None:
    nothing_there = f"http://127.0.0.1:{free_port()}"  # no running bridge: this shell's settings are shown
    env = {
        "GYM_MCP_BRIDGE_STATE_DIR": str(tmp_path),
        "GYM_MCP_BRIDGE_ADVERTISE_URL": "http://localhost:8123",
        "GYM_MCP_BRIDGE_URL": nothing_there,
    }
    before = run_show_config(env)
    assert before.returncode == 2
    assert before.stdout.strip() == (
        f"gym-mcp-bridge show-config: no API key yet: the bridge generates {tmp_path / 'api_key'} on its first start"
    )
    serve_settings("--state-dir", str(tmp_path))  # the first start
    key = (tmp_path / "api_key").read_text().strip()
    shown = run_show_config(env, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {
        "url": "http://localhost:8123",
        "mcp_url": "http://localhost:8123/mcp",
        "seed_url": "http://localhost:8123/seed_session",
        "api_key": key,
        "api_key_file": str(tmp_path / "api_key"),
        "signing_key_file": str(tmp_path / "signing_key"),
        "reported": "settings",
        "bridge_url": nothing_there,
        "rest_auth": None,
        "session_tokens": None,
    }
    text = run_show_config(env).stdout
    assert f"API key:   {key}" in text and "MCP URL:   http://localhost:8123/mcp" in text


def _first_start(state: str) -> str:
    settings, _ = keyfiles.use_state_dir(Settings(state_dir=Path(state)))
    assert settings.secret_file is not None
    return settings.signing_keys()[0][0]


def test_replicas_starting_together_on_one_volume_agree_on_one_key(tmp_path: Path) -> None:
    """`--scale replica=N` on a fresh volume: N processes generate at once; each reads a whole key,
    the same one, and no partial file is left behind."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(4) as pool:
        keys = pool.map(_first_start, [str(tmp_path)] * 16)
    assert len(set(keys)) == 1 and len(keys[0]) == 64, set(keys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["api_key", "signing_key"]


def test_api_key_dir_keeps_the_api_key_apart_from_the_signing_key(tmp_path: Path) -> None:
    """compose: the quickstart client mounts the API key's folder only, so the signing key must not
    be in it."""
    state, api = tmp_path / "state", tmp_path / "api"
    state.mkdir()
    api.mkdir()
    settings, notes = serve_settings("--state-dir", str(state), "--api-key-dir", str(api))
    assert sorted(p.name for p in state.iterdir()) == ["signing_key"]
    assert sorted(p.name for p in api.iterdir()) == ["api_key"]
    assert stat.S_IMODE((api / "api_key").stat().st_mode) == 0o600
    assert settings.api_key is not None
    assert settings.api_key.get_secret_value() == (api / "api_key").read_text().strip()
    assert any(str(api / "api_key") in n for n in notes)
    with pytest.raises(StartupError, match=r"api_key_dir .*nowhere is not a directory"):
        serve_settings("--state-dir", str(state), "--api-key-dir", str(tmp_path / "nowhere"))


def test_an_api_key_generated_before_api_key_dir_was_set_is_kept(tmp_path: Path) -> None:
    """An existing deployment upgraded to the separate folder: clients keep the key they have."""
    state, api = tmp_path / "state", tmp_path / "api"
    state.mkdir()
    api.mkdir()
    serve_settings("--state-dir", str(state))
    earlier = (state / "api_key").read_text()
    settings, _ = serve_settings("--state-dir", str(state), "--api-key-dir", str(api))
    assert (api / "api_key").read_text() == earlier
    assert settings.api_key is not None and settings.api_key.get_secret_value() == earlier.strip()


@pytest.mark.parametrize(
    "variable",
    [
        "GYM_MCP_BRIDGE_API_KEY",
        "GYM_MCP_BRIDGE_SECRET",
        "GYM_MCP_BRIDGE_API_KEY_FILE",
        "GYM_MCP_BRIDGE_SECRET_FILE",
        "GYM_MCP_BRIDGE_STATE_DIR",
    ],
)
@pytest.mark.parametrize("command", ["serve", "show-config"])
def test_an_empty_key_setting_is_refused_in_one_line(variable: str, command: str, tmp_path: Path) -> None:
    """`docker run -e GYM_MCP_BRIDGE_API_KEY=` once served an open REST surface that looked shut
    (401 without a header, 200 for 'Bearer ' with nothing after it)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GYM_MCP_BRIDGE_")}
    done = subprocess.run(
        [sys.executable, "-m", "bridge", command, *(["--port", "0"] if command == "serve" else [])],
        cwd=ROOT,
        env={**clean, "GYM_MCP_BRIDGE_STATE_DIR": str(tmp_path), variable: ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    line = (done.stdout + done.stderr).strip()
    assert "\n" not in line and "Traceback" not in line, line
    flag = variable.removeprefix("GYM_MCP_BRIDGE_").lower().replace("_", "-")
    assert f"--{flag} / {variable}: is set but empty" in line, line
    assert list(tmp_path.iterdir()) == [], "nothing was generated for a refused start"
