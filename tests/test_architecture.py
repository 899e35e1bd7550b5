"""Imports point one way along the request path: every module under bridge/ is parsed with
``ast`` (imports at module level and inside functions alike, relative ones resolved) and checked:

* ``bridge/upstream/*`` imports only ``bridge.upstream.*``, ``bridge.settings``, ``bridge.tracing`` and
  the leaves;
* ``bridge/scoring/*`` imports only ``bridge.scoring.*``, ``bridge.calllog`` and the leaves;
* a leaf (``LEAVES``: a rule every layer applies, such as Gym's rollout-id pattern) imports nothing
  of bridge/, so any layer may import it;
* the service-level modules (``SERVICE_LEVEL``) never import ``bridge.http``, ``bridge.commands`` or
  starlette;
* ``bridge/http/*`` never imports ``bridge.commands``;
* no import circle anywhere in bridge/ (a deferred import inside a function counts: the circle is
  in the design either way).

The layering is the package layout itself (bridge/http, bridge/scoring, bridge/upstream,
bridge/commands, and the service-level modules at the top); the checker is exercised on sources with
a forbidden import added, so a rule that can never fail is caught too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bridge"
SERVICE_LEVEL = frozenset(
    f"bridge.{name}"
    for name in (
        "service",
        "discovery",
        "sessions",
        "retries",
        "releasing",
        "tokens",
        "tools",
        "calllog",
        "outcomes",
        "peers",
        "settings",
        "metrics",
        "audit",
        "tracing",
    )
)
# import nothing of bridge/; all may import
LEAVES = frozenset({"bridge.rollouts", "bridge.exactjson", "bridge.limits", "bridge.throttle"})
ENTRY_POINTS = frozenset({"bridge", "bridge.__main__"})  # the version string, and ``python -m bridge``


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_package(module: str) -> bool:
    return MODULES.get(module, Path()).name == "__init__.py"


def imported(module: str, source: str) -> Iterator[tuple[int, str]]:
    """(line, module imported) for every import in ``source``, as module ``module`` would resolve it;
    ``from pkg import name`` counts as ``pkg.name`` when that is a module of bridge."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package(module) else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                yield node.lineno, submodule if submodule in MODULES else target


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(module: str, source: str) -> list[str]:
    """Each import of ``module`` that breaks a rule, as ``bridge/x.py:LINE imports y (rule)``."""
    found: list[str] = []
    where = MODULES[module].relative_to(ROOT) if module in MODULES else module
    for line, name in imported(module, source):
        rule: str | None = None
        if module in LEAVES:
            if within(name, "bridge"):
                rule = "a leaf imports nothing of bridge/"
        elif within(module, "bridge.upstream"):
            if within(name, "bridge") and not (
                within(name, "bridge.upstream") or name in {"bridge.settings", "bridge.tracing", *LEAVES}
            ):
                rule = (
                    "bridge/upstream imports only bridge.upstream.*, bridge.settings, bridge.tracing, leaves"
                )
        elif within(module, "bridge.scoring"):
            if within(name, "bridge") and not (
                within(name, "bridge.scoring") or name == "bridge.calllog" or name in LEAVES
            ):
                rule = "bridge/scoring imports only bridge.scoring.*, bridge.calllog and leaves"
        elif module in SERVICE_LEVEL:
            if any(within(name, banned) for banned in ("bridge.http", "bridge.commands", "starlette")):
                rule = "service-level modules never import bridge.http, bridge.commands or starlette"
        elif within(module, "bridge.http") and within(name, "bridge.commands"):
            rule = "bridge/http never imports bridge.commands"
        if rule is not None:
            found.append(f"{where}:{line} imports {name} ({rule})")
    return found


def source_of(module: str) -> str:
    return MODULES[module].read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------
# The rules, over the package as it is
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_one_way(module: str) -> None:
    problems = violations(module, source_of(module))
    assert not problems, "\n".join(problems)


def test_every_top_level_module_has_a_layer() -> None:
    top_level = {m for m in MODULES if m.count(".") == 1 and not is_package(m)}
    unplaced = sorted(top_level - SERVICE_LEVEL - LEAVES - ENTRY_POINTS)
    assert not unplaced, (
        f"{', '.join(unplaced)}: a top-level module of bridge/ is service-level; add it to SERVICE_LEVEL "
        "in tests/test_architecture.py (or move it under bridge/http, bridge/scoring, bridge/upstream)"
    )


def test_the_layers_exist() -> None:
    """The rules are not vacuous: every layer they name has modules, and every service-level module exists."""
    for layer in ("bridge.http", "bridge.scoring", "bridge.upstream", "bridge.commands"):
        assert sum(within(m, layer) for m in MODULES) > 1, f"no modules under {layer}"
    missing = sorted((SERVICE_LEVEL | LEAVES) - set(MODULES))
    assert not missing, f"service-level module(s) not found: {', '.join(missing)}"


def test_package_root_imports_nothing_of_bridge() -> None:
    # ``from bridge import __version__`` is fine anywhere only while the root imports no layer
    names = [name for _, name in imported("bridge", source_of("bridge")) if within(name, "bridge")]
    assert not names, f"bridge/__init__.py imports {', '.join(names)}"


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of bridge/ it imports, for every module (``sources`` overrides some)."""
    return {
        m: {n for _, n in imported(m, sources.get(m) or source_of(m)) if n in MODULES and n != m}
        for m in MODULES
    }


def import_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (``[a, b, ..., a]``) in ``graph``, or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for name in sorted(graph[module]):
            found = visit(name, [*path, module])
            if found is not None:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module, [])
        if found is not None:
            return found
    return None


def test_no_import_circle() -> None:
    circle = import_circle(import_graph({}))
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_checker_catches_an_import_circle() -> None:
    """The circle that was removed (app -> health -> serving -> app, serving importing the app inside
    a function) is found again when health imports serving once more."""
    added = source_of("bridge.http.health") + "\n\nfrom bridge.http.serving import ServingApp\n"
    circle = import_circle(import_graph({"bridge.http.health": added}))
    assert circle is not None
    assert {"bridge.http.app", "bridge.http.health", "bridge.http.serving"} <= set(circle)


# --------------------------------------------------------------------------------------------
# The checker catches what it should
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "added", "offending"),
    [
        ("bridge.service", "from bridge.http.responses import error", "bridge.http.responses"),
        ("bridge.service", "def later():\n    from bridge.commands import cli", "bridge.commands.cli"),
        ("bridge.service", "from bridge import http", "bridge.http"),
        ("bridge.service", "from .http import responses", "bridge.http.responses"),
        ("bridge.sessions", "import starlette.responses", "starlette.responses"),
        ("bridge.tokens", "from starlette.requests import Request", "starlette.requests"),
        ("bridge.upstream.transport", "from bridge.service import Bridge", "bridge.service"),
        ("bridge.upstream.transport", "from ..scoring import naming", "bridge.scoring.naming"),
        ("bridge.upstream", "import bridge.sessions", "bridge.sessions"),
        ("bridge.scoring.verify", "from bridge.tools import name_problem", "bridge.tools"),
        ("bridge.scoring.naming", "from bridge.upstream import Upstream", "bridge.upstream"),
        ("bridge.http.rest", "from bridge.commands.replay import main", "bridge.commands.replay"),
        ("bridge.rollouts", "from bridge.settings import Settings", "bridge.settings"),
        ("bridge.rollouts", "def later():\n    from bridge import tracing", "bridge.tracing"),
    ],
)
def test_checker_catches_a_forbidden_import(module: str, added: str, offending: str) -> None:
    problems = violations(module, source_of(module) + "\n\n" + added + "\n")
    assert len(problems) == 1, problems
    assert f"imports {offending} " in problems[0]
    assert str(MODULES[module].relative_to(ROOT)) in problems[0]


@pytest.mark.parametrize(
    ("module", "added"),
    [
        ("bridge.upstream.transport", "from bridge.settings import Settings"),
        ("bridge.upstream.transport", "from bridge import tracing"),
        ("bridge.upstream.transport", "from . import cookies"),
        ("bridge.scoring.verify", "from bridge.calllog import ToolCallRecord"),
        ("bridge.scoring.verify", "from .naming import render"),
        ("bridge.service", "from bridge.scoring import verify"),
        ("bridge.http.rest", "from bridge.service import Bridge"),
        ("bridge.commands.cli", "from bridge.http.serving import ServingApp"),
        ("bridge.upstream.transport", "from bridge.rollouts import ID_PATTERN"),
        ("bridge.scoring.provenance", "from bridge.rollouts import label"),
    ],
)
def test_checker_allows_imports_along_the_path(module: str, added: str) -> None:
    assert violations(module, source_of(module) + "\n\n" + added + "\n") == []
