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
* above ``bridge/upstream`` (http, service, commands), the upstream is reached through its public
  names only: ``from bridge.upstream import X`` with ``X`` in its ``__all__`` (``PeerClient`` for
  forwarding among them), and the modules it names public (``UPSTREAM_MODULES``); its transport,
  process, child and response modules are imported by nobody outside it;
* no import circle anywhere in bridge/ (a deferred import inside a function counts: the circle is
  in the design either way).

Beside the imports: the one private MCP SDK name the fast path uses still works
(``test_the_sdk_serializer_the_fast_path_uses_exists``), no other private SDK name is imported, and
every code name docs/architecture.md cites exists in bridge/.

The layering is the package layout itself (bridge/http, bridge/scoring, bridge/upstream,
bridge/commands, and the service-level modules at the top); the checker is exercised on sources with
a forbidden import added, so a rule that can never fail is caught too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bridge"
SERVICE_LEVEL = frozenset(
    f"bridge.{name}"
    for name in (
        "service",
        "admission",
        "discovery",
        "sessions",
        "retries",
        "releasing",
        "draining",
        "verifying",
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
LEAVES = frozenset(
    {"bridge.rollouts", "bridge.exactjson", "bridge.limits", "bridge.throttle", "bridge.failures"}
)
ENTRY_POINTS = frozenset({"bridge", "bridge.__main__"})  # the version string, and ``python -m bridge``
# modules of bridge/upstream others may import as modules (the rest: names from ``bridge.upstream``)
UPSTREAM_MODULES = frozenset({"bridge.upstream.mcp", "bridge.upstream.cookies", "bridge.upstream.envs"})


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_package(module: str) -> bool:
    return MODULES.get(module, Path()).name == "__init__.py"


def imported_names(module: str, source: str) -> Iterator[tuple[int, str, str | None]]:
    """(line, module imported, name taken from it or None) for every import in ``source``, as module
    ``module`` would resolve it; ``from pkg import name`` counts as module ``pkg.name`` (no name) when
    that is a module of bridge."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package(module) else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in MODULES:
                    yield node.lineno, submodule, None
                else:
                    yield node.lineno, target, alias.name


def imported(module: str, source: str) -> Iterator[tuple[int, str]]:
    """(line, module imported) for every import in ``source`` (see ``imported_names``)."""
    for line, name, _ in imported_names(module, source):
        yield line, name


def public_names(module: str) -> frozenset[str]:
    """The names in ``module``'s ``__all__`` (read with ``ast``: nothing is imported)."""
    for node in ast.parse(source_of(module)).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return frozenset(ast.literal_eval(node.value))
    return frozenset()


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(module: str, source: str) -> list[str]:
    """Each import of ``module`` that breaks a rule, as ``bridge/x.py:LINE imports y (rule)``."""
    found: list[str] = []
    where = MODULES[module].relative_to(ROOT) if module in MODULES else module
    upstream_public = public_names("bridge.upstream")
    for line, name, taken in imported_names(module, source):
        rule: str | None = None
        if not within(module, "bridge.upstream") and within(name, "bridge.upstream"):
            if name != "bridge.upstream" and name not in UPSTREAM_MODULES:
                rule = (
                    "above bridge/upstream only its public names: from bridge.upstream import one of its "
                    f"__all__, or the modules {', '.join(sorted(UPSTREAM_MODULES))}"
                )
            elif name == "bridge.upstream" and taken is not None and taken not in upstream_public:
                name = f"bridge.upstream.{taken}"
                rule = "above bridge/upstream only its public names (bridge/upstream/__init__.py __all__)"
            if rule is not None:
                found.append(f"{where}:{line} imports {name} ({rule})")
                continue
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
        (
            "bridge.http.forwarding",
            "from bridge.upstream.transport import KeepAlivePool",
            "bridge.upstream.transport",
        ),
        ("bridge.http.forwarding", "from ..upstream import transport", "bridge.upstream.transport"),
        ("bridge.http.app", "def later():\n    import bridge.upstream.process", "bridge.upstream.process"),
        ("bridge.service", "from bridge.upstream.child import Child", "bridge.upstream.child"),
        (
            "bridge.http.responses",
            "from bridge.upstream import KeepAlivePool",
            "bridge.upstream.KeepAlivePool",
        ),
        (
            "bridge.commands.cli",
            "from bridge.upstream.transport import check_request",
            "bridge.upstream.transport",
        ),
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
        ("bridge.http.forwarding", "from bridge.upstream import PeerClient, ConnectTimeout, PoolStats"),
        ("bridge.service", "from bridge.upstream import cookies"),
        ("bridge.service", "from bridge.upstream.cookies import request_headers"),
        ("bridge.upstream.process", "from bridge.upstream.transport import KeepAlivePool"),
    ],
)
def test_checker_allows_imports_along_the_path(module: str, added: str) -> None:
    assert violations(module, source_of(module) + "\n\n" + added + "\n") == []


def test_nobody_outside_upstream_imports_its_transport() -> None:
    """The keep-alive client is the upstream's own: forwarding reaches it as ``PeerClient`` from
    ``bridge.upstream``; every other module of bridge/ goes through ``Upstream``."""
    importers = sorted(
        f"{MODULES[m].relative_to(ROOT)}:{line}"
        for m in MODULES
        if not within(m, "bridge.upstream")
        for line, name in imported(m, source_of(m))
        if name == "bridge.upstream.transport"
    )
    assert not importers, (
        f"bridge.upstream.transport imported outside bridge/upstream: {', '.join(importers)}"
    )
    assert "PeerClient" in public_names("bridge.upstream")


# --------------------------------------------------------------------------------------------
# The MCP SDK: public names, and the one private one loudly checked
# --------------------------------------------------------------------------------------------


def private_sdk_name(module: str, taken: str | None) -> bool:
    """Whether importing ``taken`` from ``module`` (an MCP SDK module) takes a private name."""
    return (taken or "").startswith("_") or any(part.startswith("_") for part in module.split("."))


def test_no_private_sdk_name_is_imported() -> None:
    """``from mcp... import _x`` nowhere in bridge/ (the one private name used is an attribute,
    ``ServerRunner._serialize``, in ``mcp_results.sdk_serializer`` only)."""
    found = [
        f"{MODULES[m].relative_to(ROOT)}:{line} imports {taken or name}"
        for m in MODULES
        for line, name, taken in imported_names(m, source_of(m))
        if (within(name, "mcp") or within(name, "mcp_types")) and private_sdk_name(name, taken)
    ]
    assert not found, "\n".join(found)
    users = sorted(m for m in MODULES if "._serialize" in source_of(m))
    assert users == ["bridge.http.mcp_results"], users


def test_the_sdk_serializer_the_fast_path_uses_exists() -> None:
    """The fast path serializes results with the SDK's own private ``ServerRunner._serialize``; an
    SDK release that renames or reshapes it would silently turn the fast path off (a warning, every
    call through the SDK). This fails loudly instead."""
    from mcp.server.lowlevel import Server

    from bridge.http.mcp_results import call_result, sdk_serializer

    try:
        serialize = sdk_serializer(Server("architecture-test"))
        result = serialize("tools/call", "2025-03-26", call_result("hi", False))
    except (ImportError, AttributeError, TypeError) as exc:
        pytest.fail(
            "the MCP SDK's private ServerRunner._serialize (used by bridge/http/mcp_results.py "
            f"sdk_serializer for the /mcp fast path) changed in this SDK release: {exc!r}; "
            "adapt sdk_serializer or use a public API the SDK now offers"
        )
    assert result == {"content": [{"type": "text", "text": "hi"}], "isError": False}, (
        f"ServerRunner._serialize answers differently in this MCP SDK release: {result!r}"
    )


# --------------------------------------------------------------------------------------------
# docs/architecture.md names what exists
# --------------------------------------------------------------------------------------------

ARCHITECTURE_DOC = ROOT / "docs" / "architecture.md"
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_FENCE = re.compile(r"```\n(.*?)```", re.DOTALL)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?")
_DIAGRAM_NAME = re.compile(r"(?<![\w/.-])([A-Za-z_]\w*\.[A-Za-z_]\w*|_[a-z]\w*)(?![\w/-])")


def cited_names(text: str) -> tuple[list[str], list[str]]:
    """(code names, file paths) the doc cites: in backticks, a dotted identifier or one with a
    capital or an underscore (``Bridge.authorize``, ``read_body``), or a path ending in ``.py`` or
    ``/``; in the diagrams, ``Class.member`` and ``_private`` names."""
    names: list[str] = []
    paths: list[str] = []
    for span in _CODE_SPAN.findall(_FENCE.sub("", text)):
        span = span.strip()
        if span.endswith((".py", "/")) and re.fullmatch(r"[\w./-]+", span) and not span.startswith("/"):
            paths.append(span)
        elif _IDENTIFIER.fullmatch(span) and (span != span.lower() or "_" in span or "." in span):
            names.append(span.removesuffix("()"))
    for block in _FENCE.findall(text):
        names += [n for n in _DIAGRAM_NAME.findall(block) if not n.endswith(".py")]
    return names, paths


def defined_names() -> tuple[dict[str, set[str]], dict[str, set[str]], set[str]]:
    """(class -> its members, module's last name -> its top-level names, every word) of bridge/."""
    members: dict[str, set[str]] = {}
    bases: dict[str, list[str]] = {}
    modules: dict[str, set[str]] = {}
    words: set[str] = set()
    for module, path in MODULES.items():
        source = path.read_text(encoding="utf-8")
        words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source))
        tree = ast.parse(source)
        top = modules.setdefault(module.rsplit(".", 1)[-1], set())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                top.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name):
                        top.add(target.id)
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            found = members.setdefault(cls.name, set())
            bases[cls.name] = [b.id for b in cls.bases if isinstance(b, ast.Name)]
            for inner in ast.walk(cls):
                if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                    found.add(inner.name)
                elif isinstance(inner, ast.AnnAssign) and isinstance(inner.target, ast.Name):
                    found.add(inner.target.id)
                elif isinstance(inner, ast.Assign):
                    found.update(t.id for t in inner.targets if isinstance(t, ast.Name))
                if (
                    isinstance(inner, ast.Attribute)
                    and isinstance(inner.value, ast.Name)
                    and inner.value.id == "self"
                    and isinstance(inner.ctx, ast.Store)
                ):
                    found.add(inner.attr)
    for name in members:  # inherited members too (bases defined in bridge/)
        pending = list(bases.get(name, []))
        while pending:
            base = pending.pop()
            members[name] |= members.get(base, set())
            pending += bases.get(base, [])
    return members, modules, words


def stale(names: list[str]) -> list[str]:
    """The names in ``names`` bridge/ does not define: ``Class.member`` a member of that class,
    ``module.name`` a top-level name of that module, anything else a word of the sources."""
    members, modules, words = defined_names()
    missing = set()
    for name in names:
        head, _, member = name.partition(".")
        if head == "bridge":  # a module, or a module's top-level name
            module = max((m for m in MODULES if name == m or name.startswith(m + ".")), key=len)
            rest = name[len(module) + 1 :]
            ok = not rest or rest in modules[module.rsplit(".", 1)[-1]]
        elif member and head in members:
            ok = member in members[head]
        elif member and head in modules:
            ok = member in modules[head]
        else:
            ok = all(part.removesuffix("_total") in words for part in name.split("."))
        if not ok:
            missing.add(name)
    return sorted(missing)


def test_architecture_doc_names_what_exists() -> None:
    names, paths = cited_names(ARCHITECTURE_DOC.read_text(encoding="utf-8"))
    assert len(names) > 50 and len(paths) > 20, "the doc's citations were not found"
    missing = stale(names)
    assert not missing, f"docs/architecture.md cites names bridge/ does not define: {', '.join(missing)}"
    bases = [ROOT, PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__")]
    absent = sorted(path for path in paths if not any((base / path).exists() for base in bases))
    assert not absent, f"docs/architecture.md cites files that do not exist: {', '.join(absent)}"


def test_the_private_name_check_catches_one() -> None:
    assert private_sdk_name("mcp.server.runner", "_dump_result")
    assert private_sdk_name("mcp.server._streamable_http_modern", "x")
    assert not private_sdk_name("mcp.server.runner", "ServerRunner")


def test_the_doc_check_catches_a_stale_name() -> None:
    text = "`_KeepAlivePool.post` in `http/guard.py`, `Bridge.nothing`, `read_body`\n```\nx  _Results.encode\n```\n"
    names, paths = cited_names(text)
    assert names == ["_KeepAlivePool.post", "Bridge.nothing", "read_body", "_Results.encode"]
    assert paths == ["http/guard.py"]
    assert stale(names) == ["Bridge.nothing", "_KeepAlivePool.post", "_Results.encode"]


# --------------------------------------------------------------------------------------------
# One registry per harness
# --------------------------------------------------------------------------------------------


def test_every_harness_table_reads_the_registry() -> None:
    """Conventions, harness-side tools, client-config renderers and trajectory formats name
    harnesses only through ``bridge/scoring/harnesses.py``: each table is the registry's, and no
    name (canonical or alias) belongs to two harnesses."""
    from bridge.commands import client_config
    from bridge.scoring import conventions, harness, trajectory
    from bridge.scoring.harnesses import HARNESSES, named

    spellings = [s for h in HARNESSES for s in (h.name, *h.aliases)]
    assert len(spellings) == len(set(spellings)), "a name or alias of two harnesses"
    assert tuple(dict.fromkeys(c for h in HARNESSES for c in h.conventions)) == conventions.CONVENTIONS
    assert {h.tools_key: h.tools for h in HARNESSES if h.tools} == harness.HARNESS_TOOLS
    assert all(h.tools_key in (h.name, *h.aliases) for h in HARNESSES), "tools filed under a foreign name"
    assert set(client_config.RENDERERS) == {h.name for h in HARNESSES if h.config} | {"json"}
    assert {h.trajectory for h in HARNESSES if h.trajectory} <= set(trajectory.FORMATS)
    assert named("codex-cli") is named("codex") is not None and named("no such harness") is None
    for convention in conventions.CONVENTIONS:  # every convention has its rule
        conventions.render("tool", "server", convention)
