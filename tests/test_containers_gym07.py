"""The image built for a nemo-gym 0.7.0 upstream, run, and Gym's own shipped rollouts replayed through it.

Marked `containers` (real Docker engine, Docker SDK for Python; see tests/test_containers.py). The
image is built once per module with the documented arguments, ``NEMO_GYM_VERSION=0.7.0`` and
``GYM_PYTHON_IMAGE=python:3.13-slim`` (here the local stand-in scripts/make-base-image.sh makes from
this machine's pyenv 3.13.0; no registry is reachable), sharing every layer but the Gym stage and
the final stage's last ones with the 0.4.0 build of tests/test_containers.py through the engine's
build cache. It is kept under its tag as the cache for the next run.

Expected values come from Gym itself, read from the nemo-gym 0.7.0 wheel inside the image:
``example_session_state_mgmt``'s shipped rows (``data/example.jsonl``: initial_count, expected_count)
and its shipped rollouts (``data/example_rollouts.jsonl``: the model's function calls and the reward
Gym recorded for them). Each rollout is replayed as a harness would: seed the row, the recorded calls
over MCP with the official MCP SDK client, /verify with the recorded response.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.containers import (
    BUILD_LOGS,
    TIMINGS,
    TOKEN_HEADER,
    Engine,
    Running,
    gym_env_packages,
    image_session,
    key_file,
    make_base_image,
    mcp_call,
    result_json,
    running,
)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

GYM07_TAG = "localhost/gym-mcp-bridge:test-gym-0.7.0"
GYM_PYTHON_IMAGE = os.environ.get("GYM_MCP_BRIDGE_TEST_GYM_PYTHON_IMAGE", "python:3.13-slim")
EXAMPLE_MODULE = "resources_servers.example_session_state_mgmt"
LOCK07 = Path(__file__).resolve().parent.parent / "scripts" / "gym-env" / "nemo-gym-0.7.0.lock.txt"


@pytest.fixture(scope="module")
def image07(docker_engine: Engine) -> Iterator[str]:
    """The image with a nemo-gym 0.7.0 upstream, built once per module."""
    TIMINGS["base_image_313_s"] = make_base_image("3.13")
    buildargs = {
        "NEMO_GYM_VERSION": "0.7.0",
        "GYM_PYTHON_IMAGE": GYM_PYTHON_IMAGE,
        "NEMO_GYM_LOCK_SHA256": hashlib.sha256(LOCK07.read_bytes()).hexdigest(),
    }
    yield from image_session(docker_engine, GYM07_TAG, buildargs, "image_gym07")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    return key_file(tmp_path, "bridge_secret")


def shipped_rollouts(box: Running) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(row, recorded rollout) pairs from the wheel in the image, paired by the row's prompt."""
    code, folder = box.exec(
        "/opt/gym-env/bin/python", "-c", f"import {EXAMPLE_MODULE} as m; print(m.__path__[0])"
    )
    assert code == 0, folder
    data = folder.strip() + "/data"
    rows_and_rollouts = []
    for name in ("example.jsonl", "example_rollouts.jsonl"):
        code, text = box.exec("cat", f"{data}/{name}")
        assert code == 0, text
        rows_and_rollouts.append([json.loads(line) for line in text.splitlines() if line.strip()])
    rows, rollouts = rows_and_rollouts

    def prompt(record: dict[str, Any]) -> str:
        return str(record["responses_create_params"]["input"][0]["content"])

    by_prompt = {prompt(r): r for r in rows}
    pairs = [(by_prompt[prompt(r)], r) for r in rollouts]
    assert len(pairs) == len(rows) == 5, (len(rows), len(rollouts))
    return pairs


def replay(
    base_url: str, api_key: str, row: dict[str, Any], recorded: dict[str, Any], call: bool = True
) -> tuple[float, Any]:
    """Seeds the row, replays the recorded function calls over MCP (none when ``call`` is False:
    the control), verifies with the recorded response; returns (reward, the last call's result)."""
    response = recorded["response"]
    calls = [
        (item["name"], json.loads(item["arguments"]))
        for item in response["output"]
        if item.get("type") == "function_call" and call
    ]
    with httpx.Client(base_url=base_url, timeout=60, headers={"authorization": f"Bearer {api_key}"}) as http:
        seeded = http.post("/seed_session", json=row)
        assert seeded.status_code == 200, seeded.text
        meta = seeded.json()["mcp"]
        headers = {TOKEN_HEADER: meta["headers"][TOKEN_HEADER]}
        last = None
        if calls:
            last = result_json(asyncio.run(mcp_call(meta["url"], headers, calls))[-1])
        body = {**row, "response": response}
        verified = http.post("/verify", json=body, headers=headers)
        assert verified.status_code == 200, verified.text
        return float(verified.json()["reward"]), last


def test_image_on_nemo_gym_07(docker_engine: Engine, image07: str, secret: Path) -> None:
    """docker build --build-arg NEMO_GYM_VERSION=0.7.0 (GYM_PYTHON_IMAGE=python:3.13-slim): label,
    interpreters, /healthz's upstream version, and Gym's five shipped rollouts replayed through the
    published port give Gym's recorded rewards; a seeded row with no calls gives 0.0."""
    tag, log = image07, BUILD_LOGS[image07]
    labels = docker_engine.client.images.get(tag).attrs["Config"]["Labels"]
    assert labels["io.nemo-gym.version"] == "0.7.0", labels
    # The lock it was built from (its sha256, checked by the build), and exactly what that lock pins
    assert labels["io.nemo-gym.lock"] == hashlib.sha256(LOCK07.read_bytes()).hexdigest(), labels
    installed, expected = gym_env_packages(docker_engine, tag)
    assert installed == expected and expected["nemo-gym"] == "0.7.0", installed.items() ^ expected.items()
    # The interpreter question, stated in the build's own output by setup-gym-env.sh when the Gym
    # stage was built in this build (not when it came from the build cache)
    if "building the Gym environment in /opt/gym-env" in log:
        assert "nemo-gym 0.7.0 declares Python >= 3.13.14" in log, log[-3000:]
        assert "installing as if it were 3.13.14" in log, log[-3000:]

    t0 = time.monotonic()
    with running(docker_engine, tag, secret) as box:
        health = box.wait_ready()
        TIMINGS["image_gym07_start_to_ready_s"] = time.monotonic() - t0
        assert health["upstream"]["gym_version"] == "0.7.0", health
        assert health["upstream"]["server_name"] == "example_session_state_mgmt", health

        # The bridge keeps the base's Python; the upstream runs on the 3.13 copied beside it.
        code, out = box.exec("python3", "-c", "import sys; print(sys.version_info[:2])")
        assert (code, out.strip()) == (0, "(3, 12)"), out
        code, out = box.exec("/opt/gym-env/bin/python", "-c", "import sys; print(sys.version_info[:2])")
        assert (code, out.strip()) == (0, "(3, 13)"), out
        code, out = box.exec("id", "-u")
        assert (code, out.strip()) == (0, "10001"), out

        t1 = time.monotonic()
        pairs = shipped_rollouts(box)
        key = box.api_key()
        for row, recorded in pairs:
            reward, last = replay(box.base_url, key, row, recorded)
            assert last == {"count": row["expected_count"]}, (last, row)
            assert reward == recorded["reward"] == 1.0, (reward, recorded["reward"], row)
        # Control: the first row seeded, its recorded response sent, no call made: the counter
        # stays at initial_count.
        reward, _ = replay(box.base_url, key, *pairs[0], call=False)
        assert reward == 0.0, reward
        TIMINGS["image_gym07_rollouts_s"] = time.monotonic() - t1
        assert "Traceback" not in box.logs(), box.logs()
