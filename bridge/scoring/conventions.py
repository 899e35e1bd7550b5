"""Client naming conventions: how each MCP client shows a server's tool to its model, and the
inverse, which (server part, tool) a client could have rendered a name from.

* :func:`render` -- how a client would emit ``tool`` from a server it named ``server`` (one rule
  per client, from each client's source or measured; ``docs/naming.md`` cites them). Used by
  ``replay --as``; :func:`renderings` lists every variant a client may show (collisions, older
  releases, length limits), which ``naming`` indexes under the known aliases.
* :func:`splits` -- every (server part, tool, convention) under which some rule renders a name.
  Evidence of nothing by itself: ``naming`` decides whether the server part is a known alias.
* :func:`flat_name` -- a Codex namespace item as one string, the way Codex flattens it.

Pure functions of the names given; ``naming`` resolves on evidence with them.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import unicodedata
from collections.abc import Collection, Iterator

from bridge.scoring.harnesses import HARNESSES

__all__ = ["CONVENTIONS", "flat_name", "render", "renderings", "splits"]

CONVENTIONS: tuple[str, ...] = tuple(dict.fromkeys(c for h in HARNESSES for c in h.conventions))
"""Conventions accepted by :func:`render` (and by ``--as``): each harness's in the registry
(``bridge.scoring.harnesses``), in its order; a rule here for each.

``goose`` also covers the Docker MCP gateway; ``opencode`` also covers FastMCP namespaces and
ToolHive's default prefix (for names already in ``[A-Za-z0-9_-]`` they emit the same string).
"""

# Limits and constants, each from the client named (see docs/naming.md).
_CODEX_MAX = 128  # Codex 0.171.0, measured: hashed once len(namespace) + 2 + len(name) passes it
_CODEX_LIMITS = (_CODEX_MAX, 64)  # 64: MAX_TOOL_NAME_LENGTH in the codex-rs source once read
_CODEX_LEGACY_MAX = 64  # older codex-rs qualify_tools
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


def _render_codex(
    tool: str, server: str, *, variant: int = 0, collided: bool = False, limit: int = _CODEX_MAX
) -> str:
    """Codex ``normalize_tools_for_model_with_prefix`` flattened like ``canonical_flat_name``;
    ``limit`` is 128 in Codex 0.171.0 (measured), 64 in the source revision cited in naming.md."""
    namespace = "mcp__" + _san_codex(server)
    name = _san_codex(tool)
    suffix = "_" + _sha1(_codex_identity(server, tool, variant))[:_CODEX_HASH_LEN]
    if collided:  # two raw tools sanitized to the same name: both get the hash appended
        name += suffix
    if len(namespace) + 2 + len(name) > limit:  # fit_callable_parts_with_hash
        max_tool_len = limit - len(namespace) - 2
        if max_tool_len >= len(suffix):
            name = name[: max_tool_len - len(suffix)] + suffix
        else:
            namespace, name = namespace[: limit - len(suffix) - 2], suffix
    return namespace.rstrip("_") + "__" + name.lstrip("_")


def _render_codex_legacy(tool: str, server: str) -> str:
    """Older Codex ``qualify_tools``: sanitized ``mcp__srv__tool``; past 64, prefix + SHA-1."""
    raw = f"mcp__{server}__{tool}"
    qualified = _san_codex_legacy(raw)
    if len(qualified) > _CODEX_LEGACY_MAX:
        qualified = qualified[: _CODEX_LEGACY_MAX - _CODEX_LEGACY_HASH_LEN] + _sha1(raw)
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


def renderings(tool: str, server: str) -> Iterator[tuple[str, str]]:
    """Every (name, convention) some client shows for ``tool`` on a server it named ``server``,
    collision and historical variants included (their hashes are over ``server`` itself)."""
    yield render(tool, server, "claude-code"), "claude-code"
    for variant, collided, limit in itertools.product(range(3), (False, True), _CODEX_LIMITS):
        yield _render_codex(tool, server, variant=variant, collided=collided, limit=limit), "codex"
    # Codex namespace items when two servers sanitize to one namespace: the namespace gets "_" +
    # 12 hex of SHA-1 over (server, raw namespace, connector id) and the tool stays bare
    identity = server + "\0" + server + "\0"
    namespace = f"mcp__{_san_codex(server)}_{_sha1(identity)[:_CODEX_HASH_LEN]}"
    yield _join_namespace(namespace, tool), "codex"
    yield _join_namespace(namespace, _san_codex(tool)), "codex"
    # ``trajectory.from_codex_exec``: an ``mcp_tool_call`` event names the server as configured
    yield _join_namespace(f"mcp__{server}", tool), "codex-exec"
    yield _render_codex_legacy(tool, server), "codex-legacy"
    yield _render_agents(tool, server), "agents-sdk"
    for seed_index in range(_AGENTS_COLLISION_RETRIES + 1):
        yield _render_agents(tool, server, seed_index=seed_index, force=True), "agents-sdk"
    yield _render_gemini(tool, server), "gemini"
    yield f"{server}__{tool}", "goose"  # also older Gemini CLI on a collision, Docker MCP gateway
    yield f"{_san_dash(server)}_{_san_dash(tool)}", "opencode"  # also FastMCP, ToolHive
    yield f"{server}_{tool}", "opencode"
    yield f"{_san_codex(server)}_{_san_codex(tool)}", "opencode"  # older opencode: "-" became "_"
    yield render(tool, server, "contextforge"), "contextforge"


def _join_namespace(namespace: str, name: str) -> str:
    """Codex ``canonical_flat_name``: ``namespace.rstrip('_') + '__' + name.lstrip('_')``."""
    return namespace.rstrip("_") + "__" + name.lstrip("_")


def flat_name(emitted: str, namespace: str | None) -> str:
    """The name as one string: a Codex namespace item joined the way Codex flattens it."""
    return emitted if namespace is None else _join_namespace(namespace, emitted)


# --------------------------------------------------------------------------------------------
# Splits: which (server part, tool) could a client have rendered this name from?
# --------------------------------------------------------------------------------------------


def _strip_suffix(emitted: str, suffix: str) -> str | None:
    """``emitted`` without ``suffix``, or None when it does not end with it."""
    if len(emitted) < len(suffix) or not emitted.endswith(suffix):
        return None
    return emitted[: len(emitted) - len(suffix)]


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


def _plain_splits(emitted: str, tool: str) -> Iterator[tuple[str, str]]:
    """(server part, convention) for every plain (unhashed) rule that renders ``emitted`` from
    ``tool`` and some server name."""
    dash, word = _san_dash(tool), _san_codex(tool)
    for prefix, joint, name, convention in (
        ("mcp__", "__", dash, "claude-code"),
        ("mcp__", "__", word.lstrip("_"), "codex"),
        ("mcp_", "__", _agents_safe(tool, "tool"), "agents-sdk"),
        ("mcp_", "_", _NOT_GEMINI.sub("_", tool), "gemini"),
        ("", "__", tool, "goose"),
        ("", "_", dash, "opencode"),
        ("", "_", word, "opencode"),
        ("", "-", _slugify(tool), "contextforge"),
    ):
        rest = _strip_suffix(emitted, joint + name)
        if rest is not None and rest.startswith(prefix) and len(rest) > len(prefix):
            yield rest[len(prefix) :], convention


def _hashed_splits(emitted: str, tools: Collection[str]) -> Iterator[tuple[str, str, str]]:
    """(server, tool, convention) for every hash-suffixed name whose hash recomputes."""
    if len(emitted) <= _CODEX_MAX and _CODEX_HASHED.match(emitted):
        name_end = len(emitted) - _CODEX_HASH_LEN - 1
        for i in _delimiters(emitted, 6, len(emitted) - _CODEX_HASH_LEN):
            visible = emitted[i + 2 : name_end] if i + 2 <= name_end else ""
            fitting = [t for t in tools if _san_codex(t).lstrip("_").startswith(visible)]
            for server in _server_variants(emitted[5:i]) if fitting else ():
                for tool in fitting:
                    for variant, collided, limit in itertools.product(range(3), (False, True), _CODEX_LIMITS):
                        if (
                            _render_codex(tool, server, variant=variant, collided=collided, limit=limit)
                            == emitted
                        ):
                            yield server, tool, "codex"
    if len(emitted) == _CODEX_LEGACY_MAX and _CODEX_LEGACY_HASHED.match(emitted):
        for end in range(6, _CODEX_LEGACY_MAX - _CODEX_LEGACY_HASH_LEN + 1):
            for tool in tools:
                if _render_codex_legacy(tool, emitted[5:end]) == emitted:
                    yield emitted[5:end], tool, "codex-legacy"
    if len(emitted) == _GEMINI_SAFE_LIMIT and emitted[30:33] == "..." and emitted.startswith("mcp_"):
        # first 30 + "..." + last 30: only a server wholly inside the head can be recovered
        for i in (j for j in range(5, 30) if emitted[j] == "_"):
            for tool in tools:
                if _render_gemini(tool, emitted[4:i]) == emitted:
                    yield emitted[4:i], tool, "gemini"
    if len(emitted) <= _AGENTS_MAX and _AGENTS_HASHED.match(emitted):
        stem = emitted[: len(emitted) - _AGENTS_HASH_LEN - 1]
        for i in _delimiters(stem, 5, len(stem)):
            for tool in tools:
                for seed_index in range(_AGENTS_COLLISION_RETRIES + 1):
                    if _render_agents(tool, stem[4:i], seed_index=seed_index, force=True) == emitted:
                        yield stem[4:i], tool, "agents-sdk"


def splits(emitted: str, tools: Collection[str]) -> list[tuple[str, str, str]]:
    """Every (server part, tool, convention) under which some client renders ``emitted`` from one
    of ``tools`` and a server it named ``server part``. Evidence of nothing by itself: the server
    part must still be a known alias of this session."""
    found = [(server, tool, conv) for tool in tools for server, conv in _plain_splits(emitted, tool)]
    found.extend(_hashed_splits(emitted, tools))
    return found
