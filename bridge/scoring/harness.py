"""Harness-side tools: the tools a harness CLI offers its model besides the MCP servers' tools.

Claude Code's ``ToolSearch``, ``Bash``, ``Read``..., Codex's ``exec_command``, ``apply_patch``...,
Gemini CLI's ``run_shell_command``, ``read_file``... appear in a transcript as function calls like
any other. They are no tool of the Gym session, so ``/verify`` reports them under
``_bridge.harness_tools`` rather than as unresolved names. Some share a bare name with a session
tool (a Gym env may well have a ``read_file`` or a ``shell``), and Gym's converters write MCP calls
with bare names, so such a name alone proves nothing: ``verify`` credits it to the session tool
only with the session's own recorded call (same tool, same arguments) behind it.

The table below is data: the names each CLI put in its model requests, captured from the real
CLIs (``tests/interop/capture_harness_tools.py`` writes ``tests/fixtures/harness_tools/<client>.json``;
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

__all__ = ["HARNESS_TOOLS", "clients_of"]

HARNESS_TOOLS: dict[str, frozenset[str]] = {
    # claude-code 2.1.332, captured 2026-12-02 (tests/fixtures/harness_tools/claude-code.json)
    "claude-code": frozenset(
        {
            "Agent",
            "Bash",
            "CronCreate",
            "CronDelete",
            "CronList",
            "DeferredToolPlaceholder",
            "Edit",
            "EnterWorktree",
            "ExitWorktree",
            "ListAgents",
            "Monitor",
            "NotebookEdit",
            "Read",
            "ReportFindings",
            "ScheduleWakeup",
            "SendMessage",
            "Skill",
            "TaskStop",
            "ToolSearch",
            "WebFetch",
            "WebSearch",
            "Workflow",
            "Write",
        }
    ),
    # cline 3.0.57, captured 2026-12-02 (tests/fixtures/harness_tools/cline.json)
    "cline": frozenset(
        {
            "ask_question",
            "editor",
            "fetch_web_content",
            "read_files",
            "run_commands",
            "search_codebase",
            "spawn_agent",
            "team_attach_outcome_fragment",
            "team_await_runs",
            "team_broadcast",
            "team_cancel_run",
            "team_cleanup",
            "team_create_outcome",
            "team_finalize_outcome",
            "team_list_outcomes",
            "team_list_runs",
            "team_mission_log",
            "team_read_mailbox",
            "team_review_outcome_fragment",
            "team_run_task",
            "team_send_message",
            "team_shutdown_teammate",
            "team_spawn_teammate",
            "team_status",
            "team_task",
        }
    ),
    # codex-cli 0.171.0, captured 2026-12-02 (tests/fixtures/harness_tools/codex-cli.json)
    "codex-cli": frozenset(
        {
            "create_goal",
            "exec_command",
            "get_goal",
            "list_mcp_resource_templates",
            "list_mcp_resources",
            "multi_agent_v1.close_agent",
            "multi_agent_v1.resume_agent",
            "multi_agent_v1.send_input",
            "multi_agent_v1.spawn_agent",
            "multi_agent_v1.wait_agent",
            "read_mcp_resource",
            "request_user_input",
            "update_goal",
            "view_image",
            "write_stdin",
        }
    ),
    # nemo-gym 0.7.0 codex_agent's transcript of Codex's own items (not MCP calls, which it writes
    # under the bare tool name): responses_api_agents/codex_agent/app.py:203-216, parse_exec_jsonl
    # (tests/fixtures/harness_tools/gym-codex-agent.json)
    "gym-codex-agent": frozenset(
        {
            "apply_patch",
            "exec_command",
            "update_plan",
            "web_search",
        }
    ),
    # gemini-cli 0.56.0, captured 2026-12-02 (tests/fixtures/harness_tools/gemini-cli.json)
    "gemini-cli": frozenset(
        {
            "enter_plan_mode",
            "glob",
            "google_web_search",
            "grep_search",
            "invoke_agent",
            "list_directory",
            "read_file",
            "update_topic",
        }
    ),
    # kilocode 7.7.7, captured 2026-12-02 (tests/fixtures/harness_tools/kilocode.json)
    "kilocode": frozenset(
        {
            "background_process",
            "bash",
            "board_post",
            "board_read",
            "cancel_wakeup",
            "edit",
            "glob",
            "grep",
            "kilo_local_recall",
            "read",
            "schedule_wakeup",
            "skill",
            "task",
            "todowrite",
            "webfetch",
            "write",
        }
    ),
    # openclaw 2026.6.11, captured 2026-12-02 (tests/fixtures/harness_tools/openclaw.json)
    "openclaw": frozenset(
        {
            "apply_patch",
            "create_goal",
            "cron",
            "edit",
            "exec",
            "get_goal",
            "memory_get",
            "memory_search",
            "process",
            "read",
            "session_status",
            "sessions_history",
            "sessions_list",
            "sessions_send",
            "sessions_spawn",
            "sessions_yield",
            "skill_workshop",
            "subagents",
            "update_goal",
            "update_plan",
            "web_fetch",
            "web_search",
            "write",
        }
    ),
    # opencode 1.17.11, captured 2026-12-02 (tests/fixtures/harness_tools/opencode.json)
    "opencode": frozenset(
        {
            "bash",
            "edit",
            "glob",
            "grep",
            "read",
            "skill",
            "task",
            "todowrite",
            "webfetch",
            "write",
        }
    ),
    # pi 0.80.2, captured 2026-12-02 (tests/fixtures/harness_tools/pi.json)
    "pi": frozenset(
        {
            "bash",
            "edit",
            "read",
            "write",
        }
    ),
}
"""client -> the names of its own tools, as captured (client names as in the fixtures)."""


def clients_of(name: str, namespace: str | None = None) -> list[str]:
    """The clients whose own tools include the function ``name`` (in ``namespace``), sorted."""
    shown = f"{namespace}.{name}" if namespace else name
    return sorted(client for client, tools in HARNESS_TOOLS.items() if shown in tools)
