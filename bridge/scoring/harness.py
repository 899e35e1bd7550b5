"""Harness-side tools: the tools a harness CLI offers its model besides the MCP servers' tools.

Claude Code's ``ToolSearch``, ``Bash``, ``Read``..., Codex's ``exec_command``, ``apply_patch``...,
Gemini CLI's ``run_shell_command``, ``read_file``... appear in a transcript as function calls like
any other. They are no tool of the Gym session, so ``/verify`` reports them under
``_bridge.harness_tools`` rather than as unresolved names. Some share a bare name with a session
tool (a Gym env may well have a ``read_file`` or a ``shell``), and Gym's converters write MCP calls
with bare names, so such a name alone proves nothing: ``verify`` credits it to the session tool
only with the session's own recorded call (same tool, same arguments) behind it.

The table (``HARNESS_TOOLS``, read from the harness registry ``harnesses``) is data: the names
each CLI put in its model requests, captured from the real CLIs (``tests/interop/capture_harness_tools.py`` writes ``tests/fixtures/harness_tools/<client>.json``;
``tests/test_harness_tools.py`` checks this table equals those fixtures). One row is no CLI's request:
``gym-codex-agent`` is the names Gym's ``codex_agent`` writes into the transcript for Codex's own
work (``codex exec --json`` items: a shell command, a file change, Codex's built-in web search, its
plan), read from the nemo-gym 0.7.0 wheel; that test re-reads the wheel's source. Which harness produced a
transcript is not known to the bridge (a verify body does not say, and any caller can send one),
so every lookup is over the union of all clients: that only widens the set of bare names that need
the session's record before they are credited, and never credits anything.

A Codex namespace function is written ``<namespace>.<name>`` (as ``_bridge`` shows it).
"""

from __future__ import annotations

from bridge.scoring.harnesses import HARNESSES

__all__ = ["HARNESS_TOOLS", "clients_of"]

HARNESS_TOOLS: dict[str, frozenset[str]] = {h.tools_key: h.tools for h in HARNESSES if h.tools}
"""client -> the names of its own tools, as captured (client names as in the fixtures)."""


def clients_of(name: str, namespace: str | None = None) -> list[str]:
    """The clients whose own tools include the function ``name`` (in ``namespace``), sorted."""
    shown = f"{namespace}.{name}" if namespace else name
    return sorted(client for client, tools in HARNESS_TOOLS.items() if shown in tools)
