"""Tool-name normalization: map a tool name as a harness emitted it back to the canonical name,
only on evidence that the call was made to this environment.

MCP harnesses rename the tools they list, prefixing the name the *user* gave the server
(``mcp__srv__tool``, ``mcp_srv_tool``, ``srv-tool``, truncations, hash suffixes, ...). Before
``/verify`` the bridge hands the Gym resources server canonical names; a wrong mapping turns a
hallucinated or foreign call into a scored one, so nothing is guessed:

The client rules themselves (``render``, every variant a client shows, and the inverse,
``splits``) live in ``conventions``; they are re-exported here for callers of ``naming.render``.

* :func:`resolve` -- an emitted name resolves when it is exactly a session tool, or when some
  client rule renders exactly it from a **known alias** of this server and one tool (hash
  suffixes recompute, since the alias is known). The renderings of every tool under every alias
  are indexed once per (tools, aliases). Two tools explaining a name: ambiguous. Otherwise
  unresolved, with the reason ``unknown server alias`` (some rule splits it into a server part
  and a session tool) or ``unknown tool``.
* :func:`prove_aliases` -- an alias the session's own log proves: the server part of an emitted
  call whose tool and arguments match a call the bridge served for this session.

Data flows one way: verify gathers the tools, the known aliases and the log, and asks here.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from bridge import exactjson
from bridge.scoring.conventions import CONVENTIONS, flat_name, render, renderings, splits

__all__ = [
    "CONVENTIONS",
    "EmittedCall",
    "Resolution",
    "flat_name",
    "prove_aliases",
    "render",
    "resolve",
    "splits",
]


# --------------------------------------------------------------------------------------------
# Resolution by evidence
# --------------------------------------------------------------------------------------------

UNKNOWN_TOOL = "unknown tool"
UNKNOWN_ALIAS = "unknown server alias"


@dataclass(frozen=True)
class Resolution:
    """Outcome of resolving one emitted tool name against a session's tools and known aliases.

    ``canonical`` is the tool to score, or ``None``; then ``reason`` says why (``unknown tool``,
    ``unknown server alias``, ``ambiguous: a | b``) and the caller keeps the name as emitted.
    ``convention`` is ``exact`` for a literal tool name, else the client rule that produced it."""

    emitted: str
    canonical: str | None
    convention: str | None
    candidates: tuple[str, ...]
    reason: str | None = None

    @property
    def status(self) -> Literal["exact", "resolved", "ambiguous", "unresolved"]:
        if self.canonical is not None:
            return "exact" if self.convention == "exact" else "resolved"
        return "ambiguous" if len(self.candidates) > 1 else "unresolved"


@functools.lru_cache(maxsize=512)
def _index(tools: frozenset[str], aliases: frozenset[str]) -> dict[str, dict[str, str]]:
    """emitted name -> {tool: first convention} over every tool, alias and client rule."""
    index: dict[str, dict[str, str]] = {}
    for tool in sorted(tools):
        legacy = render(tool, "", "gemini-legacy")  # a function of the tool alone (bare, truncated)
        if legacy != tool:
            index.setdefault(legacy, {}).setdefault(tool, "gemini-legacy")
        for alias in sorted(aliases):
            for name, convention in renderings(tool, alias):
                index.setdefault(name, {}).setdefault(tool, convention)
    return index


def resolve(
    emitted: str, tools: Collection[str], aliases: Collection[str], namespace: str | None = None
) -> Resolution:
    """Map ``emitted`` to one of ``tools`` on evidence only (DESIGN "Tool-name normalization").

    It resolves when it is exactly a tool (and carries no namespace naming some server), or when
    some client rule renders exactly it from a known ``alias`` of this server and one tool. A
    name two tools could explain is ambiguous; a name whose server part is no known alias, or
    that no rule explains, is unresolved. Nothing is guessed."""
    target = flat_name(emitted, namespace)
    if namespace is None and emitted in tools:
        return Resolution(emitted, emitted, "exact", (emitted,))
    hits = _index(frozenset(tools), frozenset(aliases)).get(target, {})
    if len(hits) == 1:
        ((tool, convention),) = hits.items()
        return Resolution(emitted, tool, convention, (tool,))
    if hits:
        candidates = tuple(sorted(hits))
        return Resolution(emitted, None, None, candidates, "ambiguous: " + " | ".join(candidates))
    reason = UNKNOWN_ALIAS if splits(target, tools) else UNKNOWN_TOOL
    return Resolution(emitted, None, None, (), reason)


# --------------------------------------------------------------------------------------------
# Aliases proven by the session's own log
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EmittedCall:
    """A function call as the trajectory names it, with its arguments in canonical JSON."""

    name: str
    namespace: str | None
    arguments: bytes | None  # None when the arguments are not a JSON value


def canonical_arguments(arguments: Any) -> bytes | None:
    """Arguments (a JSON string, or already a value) as sorted compact JSON; None if not JSON."""
    if isinstance(arguments, str):
        try:
            arguments = exactjson.loads(arguments)
        except exactjson.JSONDecodeError:
            return None
    try:
        return exactjson.dumps(arguments, sort_keys=True)
    except (TypeError, ValueError):
        return None


def prove_aliases(
    calls: Iterable[EmittedCall],
    tools: Collection[str],
    aliases: Collection[str],
    served: Iterable[tuple[str, bytes | None]],
) -> set[str]:
    """Server aliases proven by the session's log: the server part of an emitted call whose tool
    and arguments match a call the bridge really served for this session.

    ``served`` is the log as (canonical tool, canonical arguments). Each served call proves at most
    one emitted call, and calls that already resolve (exactly or under a known alias) take theirs
    first, so a foreign server's call with the same tool and arguments as one of ours proves
    nothing. Repeats until no new alias is proven."""
    calls = list(calls)
    known = set(aliases)
    remaining = collections.Counter(served)
    claimed: set[int] = set()
    while True:
        for i, call in enumerate(calls):
            if i in claimed:
                continue
            result = resolve(call.name, tools, known, call.namespace)
            if result.canonical is not None:
                claimed.add(i)
                key = (result.canonical, call.arguments)
                if remaining[key] > 0:
                    remaining[key] -= 1
        proven: set[str] = set()
        for i, call in enumerate(calls):
            if i in claimed or call.arguments is None:
                continue
            found = splits(flat_name(call.name, call.namespace), tools)
            matched = {tool for _, tool, _ in found if remaining[(tool, call.arguments)] > 0}
            if len(matched) != 1:
                continue  # no served call behind it, or two tools could explain it: no proof
            (tool,) = matched
            remaining[(tool, call.arguments)] -= 1
            claimed.add(i)
            proven.add(next(server for server, t, _ in found if t == tool))  # the first rule's split
        if not proven - known:
            return known - set(aliases)
        known |= proven
