"""The harness registry: one entry per harness (an MCP client a model runs in), every fact the
bridge keeps about it in one place, under every spelling of its name.

Each ``Harness`` has its canonical ``name`` (``client-config --client``, ``replay --as`` for its
first convention, the docs), the ``aliases`` it is also known by (its CLI or package name, the name
its tools were captured under), the naming ``conventions`` it shows a server's tools under
(``conventions.render``), its own harness-side ``tools`` as captured from the real CLI (filed under
``captured_as``: ``tests/fixtures/harness_tools/<captured_as>.json``, which
``tests/test_harness_tools.py`` checks against this table), the ``/verify`` ``trajectory`` format
its transcript converts from (``trajectory.FORMATS``), and the ``config`` file ``client-config``
writes for it (a renderer of ``bridge/commands/client_config.py``).

Read by ``conventions`` (``CONVENTIONS``, in this order), ``harness`` (``HARNESS_TOOLS``) and
``commands/client_config.py`` (``--client``). Adding a harness is an entry here; docs/architecture.md
("Adding a harness") lists what cannot live here (a new naming rule, transcript format or config
format is code; fixtures, examples and the user docs).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HARNESSES", "Harness", "named"]


@dataclass(frozen=True, slots=True)
class Harness:
    """One harness; see the module docstring for each field."""

    name: str
    aliases: tuple[str, ...] = ()
    conventions: tuple[str, ...] = ()
    tools: frozenset[str] = frozenset()
    captured_as: str | None = None  # the tools' capture, when not filed under ``name``
    trajectory: str | None = None
    config: str | None = None

    @property
    def tools_key(self) -> str:
        """The name its harness-side tools are filed under (``HARNESS_TOOLS``, the fixtures)."""
        return self.captured_as or self.name


HARNESSES: tuple[Harness, ...] = (
    Harness(
        # Gym's own agents: the tool's bare name (Gym's converters write MCP calls so)
        "gym",
        conventions=("bare",),
    ),
    Harness(
        "claude-code",
        aliases=("claude",),
        conventions=("claude-code", "claude-plugin"),
        trajectory="anthropic",
        config="claude-code",
        # claude-code 2.1.332, captured 2026-12-02 (tests/fixtures/harness_tools/claude-code.json)
        tools=frozenset(
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
    ),
    Harness(
        "codex",
        aliases=("codex-cli",),
        conventions=("codex", "codex-legacy"),
        captured_as="codex-cli",
        trajectory="codex-exec",
        config="codex",
        # codex-cli 0.171.0, captured 2026-12-02 (tests/fixtures/harness_tools/codex-cli.json)
        tools=frozenset(
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
    ),
    Harness(
        "gemini",
        aliases=("gemini-cli",),
        conventions=("gemini", "gemini-legacy"),
        captured_as="gemini-cli",
        trajectory="openai-chat",
        config="gemini",
        # gemini-cli 0.56.0, captured 2026-12-02 (tests/fixtures/harness_tools/gemini-cli.json)
        tools=frozenset(
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
    ),
    Harness(
        # the OpenAI Agents SDK
        "agents-sdk",
        aliases=("openai-agents",),
        conventions=("agents-sdk",),
        config="agents-sdk",
    ),
    Harness(
        # also the Docker MCP gateway's naming
        "goose",
        conventions=("goose",),
    ),
    Harness(
        # its naming also FastMCP namespaces' and ToolHive's default prefix
        "opencode",
        conventions=("opencode",),
        config="opencode",
        # opencode 1.17.11, captured 2026-12-02 (tests/fixtures/harness_tools/opencode.json)
        tools=frozenset(
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
    ),
    Harness(
        "contextforge",
        conventions=("contextforge",),
    ),
    Harness(
        "cline",
        config="cline",
        # cline 3.0.57, captured 2026-12-02 (tests/fixtures/harness_tools/cline.json)
        tools=frozenset(
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
    ),
    Harness(
        # the Kilo Code CLI, an OpenCode fork
        "kilocode",
        aliases=("kilo",),
        config="kilocode",
        # kilocode 7.7.7, captured 2026-12-02 (tests/fixtures/harness_tools/kilocode.json)
        tools=frozenset(
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
    ),
    Harness(
        "openclaw",
        # openclaw 2026.6.11, captured 2026-12-02 (tests/fixtures/harness_tools/openclaw.json)
        tools=frozenset(
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
    ),
    Harness(
        "pi",
        # pi 0.80.2, captured 2026-12-02 (tests/fixtures/harness_tools/pi.json)
        tools=frozenset(
            {
                "bash",
                "edit",
                "read",
                "write",
            }
        ),
    ),
    Harness(
        "gym-codex-agent",
        # nemo-gym 0.7.0 codex_agent's transcript of Codex's own items (not MCP calls, which it writes
        # under the bare tool name): responses_api_agents/codex_agent/app.py:203-216, parse_exec_jsonl
        # (tests/fixtures/harness_tools/gym-codex-agent.json)
        tools=frozenset(
            {
                "apply_patch",
                "exec_command",
                "update_plan",
                "web_search",
            }
        ),
    ),
)


def named(name: str) -> Harness | None:
    """The harness ``name`` or one of its aliases names, else None."""
    for harness in HARNESSES:
        if name == harness.name or name in harness.aliases:
            return harness
    return None
