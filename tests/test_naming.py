"""Tests for bridge.naming: rendering per client convention and resolution back to canonical."""

from __future__ import annotations

import hashlib
import string

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bridge.naming import CONVENTIONS, Resolution, render, resolve

LONG = "customer_relationship_manager_update_customer"  # workplace_assistant, 45 chars
KNOWN = (
    "increment_counter",
    "get_counter_value",
    "extract_synonym_values",
    LONG,
)


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# render: literal expectations, one or more rows per client
# --------------------------------------------------------------------------------------------

CODEX_LONG_HASH = sha1(f"workplace-assistant\0workplace-assistant\0\0{LONG}\0{LONG}")[:12]
AGENTS_LONG_HASH = sha1(f"workplace-assistant\0{LONG}")[:8]
CODEX_LEGACY_HASH = sha1(f"mcp__workplace-assistant__{LONG}")

RENDER_CASES = [
    ("bare", "increment_counter", "counter", "increment_counter"),
    ("claude-code", "increment_counter", "counter", "mcp__counter__increment_counter"),
    ("claude-code", "get_counter_value", "my server.v2", "mcp__my_server_v2__get_counter_value"),
    ("claude-plugin", "increment_counter", "gym:counter", "mcp__plugin_gym_counter__increment_counter"),
    ("codex", "increment_counter", "counter", "mcp__counter__increment_counter"),
    # current Codex sanitizes '-' too
    ("codex", "get-counter", "work-place", "mcp__work_place__get_counter"),
    # 5 + 19 + 2 + 45 = 71 > 64: tool truncated to 64 - 26 - 13 = 25 chars + "_" + 12 hex
    (
        "codex",
        LONG,
        "workplace-assistant",
        "mcp__workplace_assistant__customer_relationship_man_" + CODEX_LONG_HASH,
    ),
    ("codex-legacy", "increment_counter", "counter", "mcp__counter__increment_counter"),
    ("codex-legacy", LONG, "workplace-assistant", "mcp__workplace-assistant" + CODEX_LEGACY_HASH),
    ("gemini", "increment_counter", "counter", "mcp_counter_increment_counter"),
    ("gemini", "get_counter_value", "mcp_gym", "mcp_gym_get_counter_value"),  # no double prefix
    ("gemini", "get counter/value", "counter", "mcp_counter_get_counter_value"),
    (
        "gemini",
        LONG,
        "workplace-assistant",
        "mcp_workplace-assistant_custom...onship_manager_update_customer",
    ),
    ("gemini-legacy", "increment_counter", "counter", "increment_counter"),
    (
        "gemini-legacy",
        "a" * 40 + "_" + "b" * 40,
        "counter",
        "a" * 28 + "___" + "b" * 32,
    ),
    ("agents-sdk", "increment_counter", "counter", "mcp_counter__increment_counter"),
    ("agents-sdk", "_increment_counter-", "-counter_", "mcp_counter__increment_counter"),
    (
        "agents-sdk",
        LONG,
        "workplace-assistant",
        "mcp_workplace-assistant__customer_relationship_manager_" + AGENTS_LONG_HASH,
    ),
    ("goose", "increment_counter", "counter", "counter__increment_counter"),
    ("opencode", "increment_counter", "counter", "counter_increment_counter"),
    ("opencode", "get.value", "my srv", "my_srv_get_value"),
    ("contextforge", "increment_counter", "Counter Server", "counter-server-increment-counter"),
    ("contextforge", "getCounterValue", "counter", "counter-getcountervalue"),
]


@pytest.mark.parametrize(("convention", "tool", "server", "expected"), RENDER_CASES)
def test_render(convention: str, tool: str, server: str, expected: str) -> None:
    assert render(tool, server, convention) == expected


def test_render_table_covers_every_convention() -> None:
    assert {row[0] for row in RENDER_CASES} == set(CONVENTIONS)


def test_truncated_renders_fit_the_client_limits() -> None:
    assert len(render(LONG, "workplace-assistant", "codex")) == 64
    assert len(render(LONG, "workplace-assistant", "codex-legacy")) == 64
    # 55-char stem "..._manager_" loses its trailing "_" (rstrip("_-")) before "_" + 8 hex
    assert len(render(LONG, "workplace-assistant", "agents-sdk")) == 63
    assert len(render(LONG, "workplace-assistant", "gemini")) == 63


def test_render_unknown_convention() -> None:
    with pytest.raises(ValueError, match="unknown naming convention"):
        render("increment_counter", "counter", "cursor")


# --------------------------------------------------------------------------------------------
# resolve: examples
# --------------------------------------------------------------------------------------------

RESOLVE_CASES = [
    ("increment_counter", "increment_counter", "exact"),
    ("mcp__counter__increment_counter", "increment_counter", "claude-code"),
    ("mcp__my__srv__get_counter_value", "get_counter_value", "claude-code"),  # server has "__"
    ("mcp__plugin_gym_counter__get_counter_value", "get_counter_value", "claude-plugin"),
    ("mcp__workplace_assistant__customer_relationship_man_" + CODEX_LONG_HASH, LONG, "codex"),
    ("mcp__workplace-assistant" + CODEX_LEGACY_HASH, LONG, "codex-legacy"),
    ("mcp_counter_extract_synonym_values", "extract_synonym_values", "gemini"),
    ("mcp_workplace-assistant_custom...onship_manager_update_customer", LONG, "gemini"),
    ("mcp_counter__increment_counter", "increment_counter", "agents-sdk"),
    ("mcp_workplace-assistant__customer_relationship_manager_" + AGENTS_LONG_HASH, LONG, "agents-sdk"),
    ("counter__get_counter_value", "get_counter_value", "goose"),
    ("counter_get_counter_value", "get_counter_value", "opencode"),
    ("workplace-assistant-customer-relationship-manager-update-customer", LONG, "contextforge"),
]


@pytest.mark.parametrize(("emitted", "canonical", "convention"), RESOLVE_CASES)
def test_resolve(emitted: str, canonical: str, convention: str) -> None:
    result = resolve(emitted, KNOWN)
    assert result == Resolution(emitted, canonical, convention, (canonical,))
    assert result.status == ("exact" if convention == "exact" else "resolved")


def test_sanitized_known_name_resolves() -> None:
    # Current Codex and opencode replace '.' / '-' in tool names; the known name is the raw one.
    known = ("get-counter.value", "increment_counter")
    assert resolve("mcp__counter__get_counter_value", known).canonical == "get-counter.value"
    assert resolve("counter_get-counter_value", known).canonical == "get-counter.value"
    assert resolve("counter-get-counter-value", known).canonical == "get-counter.value"


@pytest.mark.parametrize(
    ("emitted", "known", "candidates"),
    [
        # opencode: server "srv" + tool "a_b", or server "srv_a" + tool "b"
        ("srv_a_b", ("a_b", "b"), ("a_b", "b")),
        # claude-code: server "x" + "a__b", or server "x__a" + "b"
        ("mcp__x__a__b", ("a__b", "b"), ("a__b", "b")),
        # gemini: server "srv" + "get_value", or server "srv_get" + "value"
        ("mcp_srv_get_value", ("get_value", "value", "increment_counter"), ("get_value", "value")),
        # contextforge slugs case and '_' away: both known names slug to "get-value"
        ("srv-get-value", ("Get_Value", "get-value"), ("Get_Value", "get-value")),
        # goose vs. opencode reading of the same string
        ("srv__tool", ("tool", "_tool"), ("_tool", "tool")),
    ],
)
def test_ambiguous_is_reported_not_guessed(
    emitted: str, known: tuple[str, ...], candidates: tuple[str, ...]
) -> None:
    result = resolve(emitted, known)
    assert result.canonical is None
    assert result.convention is None
    assert result.candidates == candidates
    assert result.status == "ambiguous"


@pytest.mark.parametrize(
    "emitted",
    [
        "delete_everything",
        "mcp__counter__decrement_counter",
        "mcp__counter__",
        "increment_counter_",  # no rule adds a trailing separator
        "Increment_Counter",  # case differs and no case-folding client emits mcp-less names
        "",
    ],
)
def test_unknown_names_are_unresolved(emitted: str) -> None:
    result = resolve(emitted, KNOWN)
    assert result == Resolution(emitted, None, None, ())
    assert result.status == "unresolved"


def test_hash_suffix_is_verified_not_trusted() -> None:
    good = "mcp__workplace_assistant__customer_relationship_man_" + CODEX_LONG_HASH
    bad = good[:-1] + ("0" if good[-1] != "0" else "1")
    assert resolve(good, KNOWN).canonical == LONG
    assert resolve(bad, KNOWN).status == "unresolved"
    agents_bad = "mcp_workplace-assistant__customer_relationship_manager_" + "0" * 8
    assert resolve(agents_bad, KNOWN).status == "unresolved"
    legacy_bad = "mcp__workplace-assistant" + "f" * 40
    assert resolve(legacy_bad, KNOWN).status == "unresolved"


def test_hash_tells_apart_tools_with_a_shared_truncated_prefix() -> None:
    update, delete = LONG, "customer_relationship_manager_delete_customer"
    known = (update, delete)
    for tool in known:
        for convention in ("codex", "codex-legacy", "agents-sdk"):
            emitted = render(tool, "workplace-assistant", convention)
            assert resolve(emitted, known).canonical == tool, (convention, emitted)


def test_codex_collision_hash_resolves_each_raw_tool() -> None:
    # "get-x" and "get_x" both sanitize to "get_x"; Codex appends "_" + 12 hex of the raw identity.
    known = ("get-x", "get_x")
    for tool in known:
        emitted = "mcp__srv__get_x_" + sha1(f"srv\0srv\0\0{tool}\0{tool}")[:12]
        assert resolve(emitted, known) == Resolution(emitted, tool, "codex", (tool,))
    # the unhashed sanitized form cannot tell them apart
    assert resolve("mcp__srv__get_x", known).candidates == ("get-x", "get_x")


def test_codex_hash_with_older_namespace_identity() -> None:
    for namespace in ("mcp__workplace-assistant", "mcp__workplace-assistant__"):
        identity = f"workplace-assistant\0{namespace}\0\0{LONG}\0{LONG}"
        emitted = "mcp__workplace_assistant__customer_relationship_man_" + sha1(identity)[:12]
        assert resolve(emitted, KNOWN).canonical == LONG


@pytest.mark.parametrize(
    ("namespace", "name", "canonical"),
    [
        ("mcp__counter", "increment_counter", "increment_counter"),  # plain: exact
        ("mcp__counter__", "get_counter_value", "get_counter_value"),  # older trailing "__"
        ("mcp__workplace_assistant", "customer_relationship_man_" + CODEX_LONG_HASH, LONG),
    ],
)
def test_namespaced_codex_items(namespace: str, name: str, canonical: str) -> None:
    assert resolve(name, KNOWN, namespace=namespace).canonical == canonical


def test_namespaced_codex_item_with_sanitized_name() -> None:
    known = ("get-counter-value", "increment_counter")
    result = resolve("get_counter_value", known, namespace="mcp__counter")
    assert result == Resolution("get_counter_value", "get-counter-value", "codex", ("get-counter-value",))
    assert resolve("reset_counter", known, namespace="mcp__counter").status == "unresolved"


def test_exact_match_wins_even_over_a_rule_match() -> None:
    # "srv_a" is itself known; opencode's rendering of "a" on server "srv" is the same string.
    # The brief's rule: exact wins. This is the one case resolution cannot see through.
    assert resolve("srv_a", ("a", "srv_a")) == Resolution("srv_a", "srv_a", "exact", ("srv_a",))


def test_known_may_be_any_collection() -> None:
    emitted = "mcp__counter__increment_counter"
    for known in (list(KNOWN), set(KNOWN), frozenset(KNOWN), dict.fromkeys(KNOWN)):
        assert resolve(emitted, known).canonical == "increment_counter"


# --------------------------------------------------------------------------------------------
# Property-based
# --------------------------------------------------------------------------------------------

NAME_ALPHABET = string.ascii_letters + string.digits + "_-"
tool_names = st.text(alphabet=NAME_ALPHABET, min_size=1, max_size=80)
tool_sets = st.sets(tool_names, min_size=1, max_size=20)
segment = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=6)
# Servers start and end alphanumerically and may contain "_", "-" or "__" (at most 3 segments).
servers = st.builds(
    lambda first, rest: first + "".join(sep + part for sep, part in rest),
    segment,
    st.lists(st.tuples(st.sampled_from(["_", "-", "__"]), segment), max_size=2),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(known=tool_sets, server=servers)
def test_rendering_never_resolves_to_a_different_tool(known: set[str], server: str) -> None:
    for convention in CONVENTIONS:
        for tool in known:
            emitted = render(tool, server, convention)
            if emitted in known and emitted != tool:
                # Exact match wins by rule; the emitted string *is* another known tool.
                continue
            result = resolve(emitted, known)
            assert result.canonical in (tool, None), (convention, tool, emitted, result)
            if result.canonical is None:
                assert tool in result.candidates, (convention, tool, emitted, result)
                assert len(result.candidates) > 1, (convention, tool, emitted, result)


@settings(max_examples=100, deadline=None)
@given(known=tool_sets, extra=tool_sets, server=servers, data=st.data())
def test_more_known_names_never_change_a_resolution_into_another(
    known: set[str], extra: set[str], server: str, data: st.DataObject
) -> None:
    tool = data.draw(st.sampled_from(sorted(known)))
    convention = data.draw(st.sampled_from(CONVENTIONS))
    emitted = render(tool, server, convention)
    assume(emitted not in extra or emitted in known)
    small, large = resolve(emitted, known), resolve(emitted, known | extra)
    assert set(small.candidates) <= set(large.candidates)
    assert large.canonical in (small.canonical, None)


WORDS = [
    "get",
    "set",
    "list",
    "create",
    "update",
    "delete",
    "find",
    "search",
    "count",
    "increment",
    "reset",
    "read",
    "write",
    "send",
    "customer",
    "relationship",
    "manager",
    "company",
    "directory",
    "email",
    "calendar",
    "event",
    "project",
    "task",
    "counter",
    "value",
    "synonym",
    "extract",
    "analytics",
    "visitor",
    "ticket",
    "order",
    "invoice",
    "account",
]
realistic_names = st.lists(st.sampled_from(WORDS), min_size=2, max_size=8).map("_".join)
realistic_servers = st.sampled_from(
    ["counter", "workplace_assistant", "workplace-assistant", "gym", "my__srv", "synonyms2"]
)


def _non_adversarial(names: set[str]) -> bool:
    """Distinct names, none a prefix or suffix of another, distinct Gemini 30-char tails."""
    tails = {("_" + n)[-30:] for n in names}
    return len(tails) == len(names) and not any(
        a != b and (a.startswith(b) or a.endswith(b)) for a in names for b in names
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    known=st.sets(realistic_names, min_size=1, max_size=12).filter(_non_adversarial), server=realistic_servers
)
def test_realistic_tool_sets_resolve_uniquely(known: set[str], server: str) -> None:
    for convention in CONVENTIONS:
        for tool in known:
            emitted = render(tool, server, convention)
            result = resolve(emitted, known)
            assert result.canonical == tool, (convention, tool, emitted, result)
            assert result.candidates == (tool,)


def test_older_opencode_dash_to_underscore() -> None:
    # older opencode turned "-" in tool names into "_" (and the server kept its own spelling)
    known = ("get-counter", "increment_counter")
    assert resolve("counter_get_counter", known).canonical == "get-counter"
