"""The training-run benchmark (``benchmarks/soak.py``, ``make bench ARGS="soak ..."`` and
``ARGS="inflight ..."``) runs end to end with tiny counts: every reward it checks comes back exact,
it reports every figure, and a wrong reward fails it. Nothing timed is asserted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks import run, soak
from tests.fixtures.bridges import GYM_PYTHON

pytestmark = [
    pytest.mark.soak,
    pytest.mark.skipif(not GYM_PYTHON.exists(), reason="the Gym environment is missing: run 'make setup'"),
]
EXACT = {"exact": 0, "wrong": 0, "refused": 0, "error": 0}


def _soak(tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "soak.json"
    argv = ["soak", "--rollouts", "300", "--workers", "4", "--sample-s", "0.5", "--json", str(out), *extra]
    code = run.main(argv)  # as make bench ARGS="soak ..." runs it
    return code, json.loads(out.read_text())


@pytest.mark.timeout(300)
def test_soak_is_exact_and_reports_every_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _soak(tmp_path, "--retry-every", "10")
    printed = capsys.readouterr().out
    s = report["summary"]
    assert code == 0, printed
    assert report["exact"] is True and s["rollouts"] == 300
    assert s["outcomes"] == {**EXACT, "exact": 300}
    assert s["retried_rollouts"] == 30  # a retried tools/call is applied once: every reward still exact
    assert s["first_10pct_per_s"] > 0 and s["last_10pct_per_s"] > 0 and s["last_over_first"] > 0
    assert 0 < s["warm_up_at_rollouts"] <= 300
    assert all(s["bridge_rss_mb"][k] > 0 for k in ("start", "warm_up", "end"))
    assert all(s["bridge_fds"][k] > 0 for k in ("start", "warm_up", "end"))
    assert all(s["metrics_bytes"][k] > 0 for k in ("start", "warm_up", "end"))
    assert s["upstream_rss_mb"]["end"] > 0 and "bridge_rss_growth_after_warm_up_mb" in s
    assert all(s["cpu_ms_per_rollout"][k] > 0 for k in ("bridge", "upstream", "client"))
    assert s["metrics_end"]["gym_mcp_bridge_sessions_created_total"] == 300
    assert len(s["samples"]) >= 2 and s["samples"][-1]["rollouts"] == 300
    assert report["bridge_nofile_at_spawn"] == 1024 and report["bridge_nofile_soft"] >= 1024
    for line in (
        "rollouts/s: first 10 %",
        "bridge RSS: start",
        "bridge descriptors: start",
        "CPU per rollout:",
    ):
        assert line in printed
    assert "every reward exact: True" in printed


@pytest.mark.timeout(300)
def test_a_wrong_reward_fails_the_soak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check is real: a verify body one off the counter (reward 0.0) counts as wrong, and the run
    stops after ``--stop-after`` of them and exits 1."""

    def off_by_one(self: soak.Rollouts, initial: int) -> bytes:
        return orjson.dumps({**soak.ROW, "response": soak.RESPONSE, "expected_count": initial + 3})

    monkeypatch.setattr(soak.Rollouts, "_verify_body", off_by_one)
    code, report = _soak(tmp_path, "--stop-after", "10")
    outcomes = report["summary"]["outcomes"]
    assert code == 1 and report["exact"] is False
    assert (
        outcomes["exact"] == 0
        and outcomes["wrong"] >= 10
        and outcomes["wrong"] == report["summary"]["rollouts"]
    )
    assert "verify reward 0.0" in report["summary"]["reasons"]
    assert "every reward exact: False" in capsys.readouterr().out


@pytest.mark.timeout(300)
def test_inflight_is_exact_and_reports_every_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "inflight.json"
    code = run.main(
        ["inflight", "--levels", "16,64", "--per-worker", "1", "--rounds", "2", "--json", str(out)]
    )
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert code == 0, printed
    assert report["exact"] is True
    # warm-up (16 x 2) plus each level's two rounds, through the bridge and through Gym alone
    total = 2 * 16 + 2 * (16 + 64)
    assert report["tally"]["bridge"]["outcomes"] == {**EXACT, "exact": total}
    assert report["tally"]["gym"]["outcomes"] == {**EXACT, "exact": total}
    assert [s["level"] for s in report["levels"]] == [16, 64]
    for s in report["levels"]:
        for key in ("bridge_rollouts_per_s", "gym_rollouts_per_s", "bridge_p50_ms", "bridge_p99_ms", "ratio"):
            assert s[key] > 0, key
        assert len(s["ratios"]) == 2
        assert set(s["bridge_cpu_ms_per_rollout"]) == {"upstream", "client", "bridge-0", "bridge-1"}
        assert all(v > 0 for v in s["bridge_cpu_ms_per_rollout"].values())  # both replicas served
        assert s["gym_cpu_ms_per_rollout"]["upstream"] > 0 and s["client_cores"] > 0
    assert {(r["level"], r["round"], r["path"]) for r in report["runs"]} == {
        (level, rnd, path) for level in (16, 64) for rnd in (0, 1) for path in ("bridge", "gym")
    }
    assert "every reward exact: True" in printed
