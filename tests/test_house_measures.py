"""The house's two size rules, measured on the tracked sources:

* benchmarks/ is at most 15 % of the non-test Python (bridge/, benchmarks/, tools/, examples/): the
  project is a bridge with benchmarks, not the other way round;
* no module under bridge/ is longer than the ≈ 450-line guide, unless docs/architecture.md says why
  in its "Modules over the guide" list (a backquoted path and its reason on one line).

Lines are physical lines of the files git tracks (what ``wc -l`` counts), so a reader can check a
figure with ``git ls-files 'bridge/*.py' | xargs wc -l``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NON_TEST = ("bridge", "benchmarks", "tools", "examples")
BENCHMARK_SHARE = 0.15
MODULE_GUIDE = 450


def tracked_lines(folder: str) -> dict[str, int]:
    """Lines of every tracked (or new, not ignored) ``.py`` file under ``folder``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", f"{folder}/*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {path: len((ROOT / path).read_bytes().splitlines()) for path in listed if (ROOT / path).is_file()}


def benchmark_share(lines: dict[str, int]) -> float:
    total = sum(lines.values())
    return sum(n for path, n in lines.items() if path.startswith("benchmarks/")) / total


def over_the_guide(lines: dict[str, int], explained: set[str]) -> list[str]:
    return sorted(
        f"{path}: {n} lines"
        for path, n in lines.items()
        if path.startswith("bridge/") and n > MODULE_GUIDE and path not in explained
    )


def explained_modules() -> set[str]:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("## Modules over the guide", 1)
    if len(section) < 2:
        return set()
    body = section[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `(bridge/[^`]+\.py)`: \S", body, flags=re.MULTILINE))


def test_benchmarks_are_at_most_15_percent_of_the_non_test_python() -> None:
    lines: dict[str, int] = {}
    for folder in NON_TEST:
        lines.update(tracked_lines(folder))
    share = benchmark_share(lines)
    assert share <= BENCHMARK_SHARE, (
        f"benchmarks/ is {share:.1%} of the non-test Python ({sum(lines.values())} lines), "
        f"above {BENCHMARK_SHARE:.0%}"
    )


def test_no_module_is_over_the_guide_without_a_reason() -> None:
    assert over_the_guide(tracked_lines("bridge"), explained_modules()) == []


def test_the_measures_catch_a_breach() -> None:
    lines = {"bridge/a.py": 800, "benchmarks/b.py": 200, "tools/c.py": 100}
    assert benchmark_share(lines) > BENCHMARK_SHARE
    assert over_the_guide(lines, set()) == ["bridge/a.py: 800 lines"]
    assert over_the_guide(lines, {"bridge/a.py"}) == []
