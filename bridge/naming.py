"""Tool-name normalization: map a tool name as a harness emitted it back to the canonical name.

MCP harnesses rename the tools they list (``mcp__srv__tool``, ``mcp_srv_tool``, ``srv-tool``,
truncations, hash suffixes, ...). Before ``/verify`` the bridge must hand the Gym resources
server the canonical tool names it knows, or scoring silently breaks. This module owns exactly
that mapping, and nothing else:

* :func:`render` -- how a given client would emit ``tool`` from a server it named ``server``
  (one function per client convention, rules taken from each client's published source; see
  ``docs/naming.md`` for the citations). Used by ``--as`` and by the tests.
* :func:`resolve` -- given an emitted name and the session's known canonical names, return a
  :class:`Resolution`. Data flow: an exact match of a known name wins; otherwise every
  convention's matcher is run against every known name and the set of distinct known names
  some rule maps the emitted name to is collected. One name -> resolved; several -> ambiguous;
  none -> unresolved. Ambiguous and unresolved names are never guessed: ``canonical`` is
  ``None`` and the caller keeps the name as emitted and reports it.

The server part of an emitted name is whatever the *client* named the server, so it is unknown
here and may itself contain ``_``, ``-`` or ``__``. Matchers therefore test "is there some
server name for which this client would emit exactly this string for this known tool", which
for plain forms is a suffix test and for hash-suffixed forms is a recomputation of the hash for
every plausible server split. Everything is pure and cache-free; a call costs a few string
operations per known name (hashing only when the emitted name carries a hash suffix).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import unicodedata
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Literal, NamedTuple

__all__ = ["CONVENTIONS", "Resolution", "render", "resolve"]

CONVENTIONS: tuple[str, ...] = (
    "bare",
    "claude-code",
    "claude-plugin",
    "codex",
    "codex-legacy",
    "gemini",
    "gemini-legacy",
    "agents-sdk",
    "goose",
    "opencode",
    "contextforge",
)
"""Conventions accepted by :func:`render` (and by ``--as``).

``goose`` also covers the Docker MCP gateway; ``opencode`` also covers FastMCP namespaces and
ToolHive's default prefix (for names already in ``[A-Za-z0-9_-]`` they emit the same string).
"""

# Limits and constants, each from the client named (see docs/naming.md).
_CODEX_MAX = 64  # codex-rs MAX_TOOL_NAME_LENGTH
_CODEX_HASH_LEN = 12  # codex-rs CALLABLE_NAME_HASH_LEN
_CODEX_LEGACY_HASH_LEN = 40  # full SHA-1 hex, older codex-rs qualify_tools
_GEMINI_SAFE_LIMIT = 63  # gemini-cli MAX_FUNCTION_NAME_LENGTH - 1
_AGENTS_MAX = 64  # openai-agents-python _MCP_FUNCTION_TOOL_NAME_MAX_LENGTH
_AGENTS_HASH_LEN = 8  # openai-agents-python _MCP_FUNCTION_TOOL_HASH_LENGTH
_AGENTS_COLLISION_RETRIES = 3  # collision re-hash seeds `seed\0n` tried when resolving
_MAX_SERVER_VARIANT_BITS = 10  # cap on `_`->`-` guesses for a sanitized Codex server name

_NOT_DASH_WORD = re.compile(r"[^A-Za-z0-9_-]")
_NOT_WORD = re.compile(r"[^A-Za-z0-9_]")
_NOT_GEMINI = re.compile(r"[^A-Za-z0-9_\-.:]")
_NOT_GEMINI_LEGACY = re.compile(r"[^A-Za-z0-9_.-]")
_CODEX_HASHED = re.compile(r"^mcp__.*_[0-9a-f]{12}$", re.DOTALL)
_CODEX_LEGACY_HASHED = re.compile(r"^mcp__.{19}[0-9a-f]{40}$", re.DOTALL)
_AGENTS_HASHED = re.compile(r"^mcp_.*_[0-9a-f]{8}$", re.DOTALL)
_HEX12_TAIL = re.compile(r"^(.+)_[0-9a-f]{12}$", re.DOTALL)
_SLUG_CONTRACTION = re.compile(r"(\w)['\u2019](\w)")
_SLUG_NON_ALNUM = re.compile(r"[\W_]+")
_DASH_OR_UNDERSCORE_RUN = re.compile(r"[-_]+")
_SLUG_SPECIAL = {"æ": "ae", "ß": "ss", "ø": "o"}


# --------------------------------------------------------------------------------------------
# Sanitizers (one per client rule)
# --------------------------------------------------------------------------------------------


def _san_dash(name: str) -> str:
    """Claude Code, opencode, older Codex: every char outside [A-Za-z0-9_-] becomes ``_``."""
    return _NOT_DASH_WORD.sub("_", name)


def _san_codex(name: str) -> str:
    """Current Codex ``sanitize_responses_api_tool_name``: outside [A-Za-z0-9_] -> ``_``."""
    return _NOT_WORD.sub("_", name) or "_"


def _san_codex_legacy(name: str) -> str:
    """Older Codex ``sanitize_responses_api_tool_name``: outside [A-Za-z0-9_-] -> ``_``."""
    return _NOT_DASH_WORD.sub("_", name) or "_"


def _agents_safe(value: str, fallback: str) -> str:
    """Agents SDK ``_safe_tool_name_part``: ASCII [A-Za-z0-9_-] kept, strip ``_-`` ends."""
    return _NOT_DASH_WORD.sub("_", value).strip("_-") or fallback


def _slugify(text: str) -> str:
    """ContextForge ``slugify`` with the default separator ``-``."""
    slug = _SLUG_CONTRACTION.sub(r"\1\2", text.lower())
    slug = _SLUG_NON_ALNUM.sub("-", slug).strip("-")
    for special, replacement in _SLUG_SPECIAL.items():
        slug = slug.replace(special, replacement)
    return unicodedata.normalize("NFKD", slug).encode("ascii", "ignore").decode()


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------------
# Renderers
# --------------------------------------------------------------------------------------------


def _codex_identity(server: str, tool: str, variant: int = 0) -> str:
    """Codex raw tool identity hashed for suffixes: server, namespace, connector, name, tool.

    The raw namespace of a plain MCP server changed across releases: the server name itself
    (current ``regular_mcp_tool_info_from_listed_tool``), ``mcp__<srv>`` and ``mcp__<srv>__``.
    """
    namespace = (server, f"mcp__{server}", f"mcp__{server}__")[variant]
    return f"{server}\0{namespace}\0\0{tool}\0{tool}"


def _render_codex(tool: str, server: str, *, variant: int = 0, collided: bool = False) -> str:
    """Codex ``normalize_tools_for_model_with_prefix`` flattened like ``canonical_flat_name``."""
    namespace = "mcp__" + _san_codex(server)
    name = _san_codex(tool)
    suffix = "_" + _sha1(_codex_identity(server, tool, variant))[:_CODEX_HASH_LEN]
    if collided:  # two raw tools sanitized to the same name: both get the hash appended
        name += suffix
    if len(namespace) + 2 + len(name) > _CODEX_MAX:  # fit_callable_parts_with_hash
        max_tool_len = _CODEX_MAX - len(namespace) - 2
        if max_tool_len >= len(suffix):
            name = name[: max_tool_len - len(suffix)] + suffix
        else:
            namespace, name = namespace[: _CODEX_MAX - len(suffix) - 2], suffix
    return namespace.rstrip("_") + "__" + name.lstrip("_")


def _render_codex_legacy(tool: str, server: str) -> str:
    """Older Codex ``qualify_tools``: sanitized ``mcp__srv__tool``; past 64, prefix + SHA-1."""
    raw = f"mcp__{server}__{tool}"
    qualified = _san_codex_legacy(raw)
    if len(qualified) > _CODEX_MAX:
        qualified = qualified[: _CODEX_MAX - _CODEX_LEGACY_HASH_LEN] + _sha1(raw)
    return qualified


def _render_gemini(tool: str, server: str) -> str:
    """Gemini CLI ``generateValidName(`${server}_${tool}`)``."""
    name = f"{server}_{tool}"
    if not name.startswith("mcp_"):
        name = "mcp_" + name
    name = _NOT_GEMINI.sub("_", name)
    if not (name[0].isascii() and (name[0].isalpha() or name[0] == "_")):
        name = "_" + name
    if len(name) > _GEMINI_SAFE_LIMIT:
        name = name[:30] + "..." + name[-30:]
    return name


def _render_gemini_legacy(tool: str) -> str:
    """Older Gemini CLI ``generateValidName(tool)``: bare, 28 + ``___`` + 32 past 63 chars."""
    name = _NOT_GEMINI_LEGACY.sub("_", tool)
    if len(name) > _GEMINI_SAFE_LIMIT:
        name = name[:28] + "___" + name[-32:]
    return name


def _render_agents(tool: str, server: str, *, seed_index: int = 0, force: bool = False) -> str:
    """Agents SDK ``include_server_in_tool_names``: ``mcp_<srv>__<tool>``, 8-hex past 64."""
    base = f"mcp_{_agents_safe(server, 'server')}__{_agents_safe(tool, 'tool')}"
    if not force and seed_index == 0 and len(base) <= _AGENTS_MAX:
        return base
    seed = f"{server}\0{tool}" + (f"\0{seed_index}" if seed_index else "")
    suffix = "_" + _sha1(seed)[:_AGENTS_HASH_LEN]
    stem = base[: _AGENTS_MAX - len(suffix)].rstrip("_-") or "mcp"
    return stem + suffix


def render(tool: str, server: str, convention: str) -> str:
    """Return the name client ``convention`` would show the model for ``tool`` on ``server``.

    ``server`` is the name the client gave the server. For ``claude-plugin`` pass
    ``"<plugin>:<server>"`` (Claude Code names plugin servers ``plugin:<plugin>:<server>``).
    Per-tool rules only: renames a client applies because *another* tool collided (Codex and
    Agents SDK hash both colliding names) are recognised by :func:`resolve` but not rendered.

    Raises:
        ValueError: ``convention`` is not one of :data:`CONVENTIONS`.
    """
    if convention == "bare":
        return tool
    if convention == "claude-code":
        return f"mcp__{_san_dash(server)}__{_san_dash(tool)}"
    if convention == "claude-plugin":
        return f"mcp__{_san_dash('plugin:' + server)}__{_san_dash(tool)}"
    if convention == "codex":
        return _render_codex(tool, server)
    if convention == "codex-legacy":
        return _render_codex_legacy(tool, server)
    if convention == "gemini":
        return _render_gemini(tool, server)
    if convention == "gemini-legacy":
        return _render_gemini_legacy(tool)
    if convention == "agents-sdk":
        return _render_agents(tool, server)
    if convention == "goose":
        return f"{server}__{tool}"
    if convention == "opencode":
        return f"{_san_dash(server)}_{_san_dash(tool)}"
    if convention == "contextforge":
        return f"{_slugify(server)}-{_slugify(tool)}"
    raise ValueError(f"unknown naming convention {convention!r}; expected one of {CONVENTIONS}")


# --------------------------------------------------------------------------------------------
# Matchers: does some server name make `convention` emit exactly `emitted` for `tool`?
# --------------------------------------------------------------------------------------------


def _strip_suffix(emitted: str, suffix: str) -> str | None:
    """``emitted`` without ``suffix``, or None when it does not end with it."""
    if len(emitted) < len(suffix) or not emitted.endswith(suffix):
        return None
    return emitted[: len(emitted) - len(suffix)]


class _Forms(NamedTuple):
    """The per-client spellings of one known tool name, computed once per :func:`resolve`."""

    raw: str
    dash: str  # outside [A-Za-z0-9_-] -> "_" (Claude Code, opencode, older Codex)
    word: str  # outside [A-Za-z0-9_] -> "_" (current Codex)
    gemini: str  # outside [A-Za-z0-9_.:-] -> "_"
    agents: str  # Agents SDK safe part
    slug: str  # ContextForge slug


def _forms(tool: str) -> _Forms:
    if _NOT_DASH_WORD.search(tool) is None:  # usual case: cheap equivalents of each rule
        return _Forms(
            raw=tool,
            dash=tool,
            word=tool.replace("-", "_") or "_",
            gemini=tool,
            agents=tool.strip("_-") or "tool",
            slug=_DASH_OR_UNDERSCORE_RUN.sub("-", tool.lower()).strip("-"),
        )
    return _Forms(
        raw=tool,
        dash=_san_dash(tool),
        word=_san_codex(tool),
        gemini=_NOT_GEMINI.sub("_", tool),
        agents=_agents_safe(tool, "tool"),
        slug=_slugify(tool),
    )


def _match_claude_plugin(emitted: str, f: _Forms) -> bool:
    rest = _strip_suffix(emitted, "__" + f.dash)
    return (
        rest is not None
        and rest.startswith("mcp__plugin_")
        and len(rest) > len("mcp__plugin_")
        and _san_dash(rest) == rest
    )


def _match_claude_code(emitted: str, f: _Forms) -> bool:
    rest = _strip_suffix(emitted, "__" + f.dash)
    return rest is not None and rest.startswith("mcp__") and len(rest) > 5 and _san_dash(rest) == rest


def _match_codex_plain(emitted: str, f: _Forms) -> bool:
    for sanitize, name in ((_san_codex, f.word), (_san_codex_legacy, f.dash or "_")):
        rest = _strip_suffix(emitted, "__" + name.lstrip("_"))
        if (
            rest is not None
            and rest.startswith("mcp__")
            and len(rest) > 5
            and sanitize(rest) == rest
            and len(rest) + 2 + len(name) <= _CODEX_MAX
        ):
            return True
    return False


def _server_variants(sanitized: str) -> Iterator[str]:
    """Raw server names Codex may have sanitized to ``sanitized`` (``-`` became ``_``)."""
    yield sanitized
    stripped = _HEX12_TAIL.match(sanitized)  # namespace hash suffix of some Codex revisions
    if stripped:
        yield stripped.group(1)
    slots = [i for i, c in enumerate(sanitized) if c == "_"]
    if not slots or len(slots) > _MAX_SERVER_VARIANT_BITS:
        return
    for flips in itertools.product((False, True), repeat=len(slots)):
        if any(flips):
            chars = list(sanitized)
            for slot, flip in zip(slots, flips, strict=True):
                if flip:
                    chars[slot] = "-"
            yield "".join(chars)


def _delimiters(text: str, start: int, stop: int) -> Iterator[int]:
    """Indexes ``i`` in ``[start, stop)`` with ``text[i:i+2] == "__"``."""
    i = text.find("__", start)
    while 0 <= i < stop:
        yield i
        i = text.find("__", i + 1)


def _match_codex_hashed(emitted: str, known: Collection[_Forms]) -> set[str]:
    if len(emitted) > _CODEX_MAX or not _CODEX_HASHED.match(emitted):
        return set()
    hit: set[str] = set()
    name_end = len(emitted) - _CODEX_HASH_LEN - 1
    for i in _delimiters(emitted, 6, len(emitted) - _CODEX_HASH_LEN):
        visible = emitted[i + 2 : name_end] if i + 2 <= name_end else ""
        tools = [
            f.raw
            for f in known
            if f.word.lstrip("_").startswith(visible) or f.dash.lstrip("_").startswith(visible)
        ]
        if not tools:
            continue
        for server in _server_variants(emitted[5:i]):
            for tool in tools:
                if tool in hit:
                    continue
                for variant, collided in itertools.product(range(3), (False, True)):
                    if _render_codex(tool, server, variant=variant, collided=collided) == emitted:
                        hit.add(tool)
                        break
    return hit


def _match_codex_legacy_hashed(emitted: str, known: Collection[_Forms]) -> set[str]:
    if len(emitted) != _CODEX_MAX or not _CODEX_LEGACY_HASHED.match(emitted):
        return set()
    # Only the first 24 characters survive, so only a server name wholly inside them (at most
    # 19 characters) can be tried: every prefix of emitted[5:24] is a candidate.
    prefix_len = _CODEX_MAX - _CODEX_LEGACY_HASH_LEN
    hit: set[str] = set()
    for end in range(6, prefix_len + 1):
        after = emitted[end:prefix_len]  # what follows the server: "__" + start of the tool
        if not ("__".startswith(after) or after.startswith("__")):
            continue
        visible = after[2:]
        for f in known:
            if (
                f.raw not in hit
                and f.dash.startswith(visible)
                and _render_codex_legacy(f.raw, emitted[5:end]) == emitted
            ):
                hit.add(f.raw)
    return hit


def _match_gemini(emitted: str, f: _Forms) -> bool:
    name = f.gemini
    if len(emitted) <= _GEMINI_SAFE_LIMIT:
        rest = _strip_suffix(emitted, "_" + name)
        if (
            rest is not None
            and (rest == "mcp" or rest.startswith("mcp_"))
            and _NOT_GEMINI.sub("_", rest) == rest
        ):
            return True
    if len(emitted) == _GEMINI_SAFE_LIMIT and emitted[30:33] == "..." and emitted.startswith("mcp_"):
        # First 30 + "..." + last 30: with the server unknown (and possibly long) the head says
        # nothing about the tool; the tail must be the end of "_<tool>" (or contain all of it).
        tail, ending = emitted[33:], "_" + name
        return tail.endswith(ending) or ending.endswith(tail)
    return False


def _match_gemini_legacy(emitted: str, f: _Forms) -> bool:
    return _render_gemini_legacy(f.raw) == emitted


def _match_agents_plain(emitted: str, f: _Forms) -> bool:
    if len(emitted) > _AGENTS_MAX:
        return False
    rest = _strip_suffix(emitted, "__" + f.agents)
    return (
        rest is not None
        and rest.startswith("mcp_")
        and len(rest) > 4
        and _agents_safe(rest[4:], "") == rest[4:]
    )


def _match_agents_hashed(emitted: str, known: Collection[_Forms]) -> set[str]:
    if len(emitted) > _AGENTS_MAX or not _AGENTS_HASHED.match(emitted):
        return set()
    stem = emitted[: len(emitted) - _AGENTS_HASH_LEN - 1]
    hit: set[str] = set()
    for i in _delimiters(stem, 5, len(stem)):
        server, visible = stem[4:i], stem[i + 2 :]
        for f in known:
            if f.raw in hit or not f.agents.startswith(visible):
                continue
            for seed_index in range(_AGENTS_COLLISION_RETRIES + 1):
                if _render_agents(f.raw, server, seed_index=seed_index, force=True) == emitted:
                    hit.add(f.raw)
                    break
    return hit


def _match_goose(emitted: str, f: _Forms) -> bool:
    rest = _strip_suffix(emitted, "__" + f.raw)
    return bool(rest)


def _match_opencode(emitted: str, f: _Forms) -> bool:
    # opencode sanitizes (older releases also turned "-" into "_"); FastMCP / ToolHive do not
    for name in (f.dash, f.raw, f.word):
        rest = _strip_suffix(emitted, "_" + name)
        if rest:
            return True
    return False


def _match_contextforge(emitted: str, f: _Forms) -> bool:
    rest = _strip_suffix(emitted, "-" + f.slug)
    return rest is not None and rest != "" and _slugify(rest) == rest


_PerTool = Callable[[str, _Forms], bool]
_PerSet = Callable[[str, Collection[_Forms]], set[str]]

# Checked in this order; a resolved name reports the first rule that produced it.
_MATCHERS: tuple[tuple[str, _PerTool | None, _PerSet | None], ...] = (
    ("claude-plugin", _match_claude_plugin, None),
    ("claude-code", _match_claude_code, None),
    ("codex", _match_codex_plain, _match_codex_hashed),
    ("codex-legacy", None, _match_codex_legacy_hashed),
    ("agents-sdk", _match_agents_plain, _match_agents_hashed),
    ("gemini", _match_gemini, None),
    ("gemini-legacy", _match_gemini_legacy, None),
    ("goose", _match_goose, None),
    ("opencode", _match_opencode, None),
    ("contextforge", _match_contextforge, None),
)


# --------------------------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    """Outcome of resolving one emitted tool name against a session's known names.

    ``canonical`` is ``None`` when the name is unresolved (``candidates`` empty) or ambiguous
    (``candidates`` lists every known name some rule maps it to, sorted). The caller must then
    keep ``emitted`` unchanged and report it; this module never picks one.
    """

    emitted: str
    canonical: str | None
    convention: str | None
    candidates: tuple[str, ...]

    @property
    def status(self) -> Literal["exact", "resolved", "ambiguous", "unresolved"]:
        if self.canonical is not None:
            return "exact" if self.convention == "exact" else "resolved"
        return "ambiguous" if len(self.candidates) > 1 else "unresolved"


def _join_namespace(namespace: str, name: str) -> str:
    """Codex ``canonical_flat_name``: ``namespace.rstrip('_') + '__' + name.lstrip('_')``."""
    return namespace.rstrip("_") + "__" + name.lstrip("_")


def resolve(emitted: str, known: Collection[str], namespace: str | None = None) -> Resolution:
    """Map ``emitted`` back to one of ``known`` (the session's canonical tool names).

    ``namespace`` is the ``namespace`` field of a Responses ``function_call`` item (Codex sends
    ``namespace: "mcp__<srv>"`` with ``name: "<tool>"``); the two are joined the way Codex
    flattens them before matching.
    """
    if emitted in known:
        return Resolution(emitted, emitted, "exact", (emitted,))
    target = emitted if namespace is None else _join_namespace(namespace, emitted)
    if target in known:
        return Resolution(emitted, target, "exact", (target,))

    forms = [_forms(tool) for tool in set(known)]
    first_rule: dict[str, str] = {}
    for convention, per_tool, per_set in _MATCHERS:
        found = per_set(target, forms) if per_set is not None else set()
        if per_tool is not None:
            found.update(f.raw for f in forms if f.raw not in found and per_tool(target, f))
        for tool in found:
            first_rule.setdefault(tool, convention)

    if len(first_rule) == 1:
        ((tool, convention),) = first_rule.items()
        return Resolution(emitted, tool, convention, (tool,))
    return Resolution(emitted, None, None, tuple(sorted(first_rule)))
