"""``SessionRegistry`` on its own (no server): expiry, the session cap, tombstones and their reasons,
and the call-log budgets -- ``max_calls_logged`` and ``max_session_log_bytes`` per session,
``max_log_bytes`` across sessions, given back when a session closes, expires or is lost -- with
the incomplete-log summary ``recorded`` verify refuses with."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
import tracemalloc

import pytest

from bridge import exactjson
from bridge.calllog import ToolCallRecord, record_size
from bridge.sessions import (
    DROPPED_SHOWN,
    LOST_REASON,
    SEED_HEADROOM,
    SESSION_OVERHEAD,
    TOMBSTONE_BYTES,
    TOMBSTONE_SHARE,
    Session,
    SessionBudgetFull,
    SessionCapReached,
    SessionEnded,
    SessionError,
    SessionLost,
    SessionRegistry,
)
from bridge.settings import Settings
from bridge.tools import ToolSet

GENERATION = 1


def registry(
    ttl_s: float = 60,
    max_sessions: int = 10,
    max_calls_logged: int = 100,
    max_session_log_bytes: int = 10_000,
    max_log_bytes: int = 100_000,
    budget_bytes: int = 64 * 1024 * 1024,
) -> SessionRegistry:
    return SessionRegistry(
        ttl_s, max_sessions, max_calls_logged, max_session_log_bytes, max_log_bytes, budget_bytes
    )


def open_session(sessions: SessionRegistry, generation: int = GENERATION) -> Session:
    return sessions.create(b'{"initial_count": 0}', "jar=1", ToolSet(tools={}), generation)


def call(name: str = "get_counter_value", output: str = "", **arguments: object) -> ToolCallRecord:
    return ToolCallRecord(
        call_id=f"call_{name}",
        emitted_name=f"mcp__gym__{name}",
        canonical_name=name,
        arguments=dict(arguments),
        output=output,
        is_error=False,
        started_at=time.time(),
        duration_s=0.001,
    )


def sized(size: int, name: str = "increment_counter") -> ToolCallRecord:
    """A record of exactly ``size`` bytes (``{}`` arguments are 2 of them)."""
    record = call(name, output="x" * (size - 2))
    assert record.size == size
    return record


# -- record size -------------------------------------------------------------------------------


def test_record_size_is_arguments_json_plus_output_utf8() -> None:
    record = call("increment_counter", output='{"success": true}', count=13)
    assert record.size == len(b'{"count":13}') + len(b'{"success": true}')
    assert call(output="é" * 10).size == 2 + 20  # UTF-8 bytes, not characters
    assert record_size({"s": "\ud800"}, "\ud800") > 3  # lone surrogates (not JSON): measured, no crash
    record.arguments = {"count": "x" * 1000}
    assert record.size == 12 + 17, "measured once, when the record is built"


def test_tool_call_record_has_no_extra_field() -> None:
    with pytest.raises(TypeError):
        ToolCallRecord("c", "e", "n", {}, "", False, 0.0, 0.0, {})  # type: ignore[call-arg]


# -- lookups, expiry, cap, tombstones ------------------------------------------------------------


def test_get_returns_the_open_session_and_refuses_unknown_ids() -> None:
    sessions = registry()
    session = open_session(sessions)
    assert sessions.get(session.sid, GENERATION) is session
    assert session.row == {"initial_count": 0} and len(sessions) == 1
    with pytest.raises(SessionError, match="unknown session nope"):
        sessions.get("nope", GENERATION)


def test_expired_session_is_refused_and_tombstoned_as_expired() -> None:
    sessions = registry()
    session = open_session(sessions)
    session.expires_at = time.time() - 1
    expired = rf"^session {session.sid} ended at \S+Z: expired \(session_ttl_s after its seed\); seed a new session$"
    with pytest.raises(SessionEnded, match=expired) as first:
        sessions.get(session.sid, GENERATION)
    assert not isinstance(first.value, SessionLost)
    assert len(sessions) == 0
    with pytest.raises(SessionEnded, match=expired):  # the tombstone answers now
        sessions.get(session.sid, GENERATION)


def test_sweep_evicts_expired_sessions_in_creation_order() -> None:
    sessions = registry(ttl_s=10)
    old, young = open_session(sessions), open_session(sessions)
    young.expires_at = old.expires_at + 5
    assert sessions.sweep(now=old.expires_at) == 1
    assert sessions.get(young.sid, GENERATION) is young
    with pytest.raises(SessionError, match="unknown session"):  # its token expired too: no tombstone needed
        sessions.get(old.sid, GENERATION)
    assert sessions.sweep(now=young.expires_at) == 1 and len(sessions) == 0


def test_session_cap_counts_open_sessions_only() -> None:
    sessions = registry(max_sessions=2)
    first, _ = open_session(sessions), open_session(sessions)
    with pytest.raises(SessionCapReached, match=r"session cap reached \(2 unfinished sessions\)"):
        open_session(sessions)
    with pytest.raises(SessionCapReached, match="retry later or raise max_sessions"):
        sessions.ensure_room()  # what the service asks before the upstream sees a seed
    sessions.close(first.sid)
    sessions.ensure_room()
    open_session(sessions)  # a closed session frees its slot
    assert len(sessions) == 2


def test_closed_session_is_refused_with_the_closed_reason() -> None:
    sessions = registry()
    session = open_session(sessions)
    assert sessions.close(session.sid) is session
    assert sessions.close(session.sid) is None  # closing twice is harmless
    with pytest.raises(
        SessionEnded, match=f"session {session.sid} ended at .*: closed by /close_session"
    ) as info:
        sessions.get(session.sid, GENERATION)
    assert not isinstance(info.value, SessionLost)


def test_lost_sessions_by_lookup_and_by_sweep() -> None:
    sessions = registry()
    looked_up, swept, fresh = open_session(sessions), open_session(sessions), open_session(sessions, 2)
    with pytest.raises(SessionLost, match="session lost"):
        sessions.get(looked_up.sid, GENERATION + 1)
    assert sessions.sweep(generation=2) == 1  # swept: built on generation 1
    with pytest.raises(SessionLost) as info:
        sessions.get(swept.sid, 2)
    assert str(info.value) == LOST_REASON
    with pytest.raises(SessionLost):  # the tombstone keeps the reason
        sessions.get(looked_up.sid, 2)
    assert sessions.get(fresh.sid, 2) is fresh


def test_tombstones_are_forgotten_once_their_tokens_expired() -> None:
    sessions = registry(ttl_s=10)
    session = open_session(sessions)
    sessions.close(session.sid)
    sessions.sweep(now=session.expires_at - 1)
    with pytest.raises(SessionError, match="closed by /close_session"):
        sessions.get(session.sid, GENERATION)
    sessions.sweep(now=session.expires_at + 1)
    with pytest.raises(SessionError, match="unknown session"):
        sessions.get(session.sid, GENERATION)


def test_tombstones_hold_at_most_an_eighth_of_the_budget() -> None:
    budget = 1024 * 1024
    sessions = registry(max_sessions=100_000, budget_bytes=budget)
    limit = budget // TOMBSTONE_SHARE // TOMBSTONE_BYTES
    closed = []
    for _ in range(limit + 50):
        session = open_session(sessions)
        sessions.close(session.sid)
        closed.append(session.sid)
    assert len(sessions._tombstones) == limit
    with pytest.raises(SessionEnded, match="closed by /close_session"):  # the newest are the ones kept
        sessions.get(closed[-1], GENERATION)
    with pytest.raises(SessionError, match="unknown session"):
        sessions.get(closed[0], GENERATION)
    assert sessions.state_bytes == limit * TOMBSTONE_BYTES


# -- call-log budgets ----------------------------------------------------------------------------


def test_calls_within_every_cap_are_logged_in_order() -> None:
    sessions = registry()
    session = open_session(sessions)
    served = [call("increment_counter", '{"success": true}', count=1), call("get_counter_value", "1")]
    for record in served:
        sessions.record(session, record)
    assert session.calls == served
    assert session.log_complete and session.incomplete_reason() is None
    assert session.dropped.count == 0 and session.calls_served == 2
    assert session.log_bytes == sessions.log_bytes == sum(r.size for r in served)


def test_the_log_reads_back_every_argument_exactly_and_stays_out_of_the_collectors_sight() -> None:
    """Arguments go into the log as JSON bytes only where those read back equal (types too); a NaN,
    an integer past 64 bits or a tuple stays the object it was. Rows of JSON-able calls are not
    tracked by the cyclic collector after one pass, so full collections do not walk the logs."""
    sessions = registry()
    session = open_session(sessions)
    tricky = [
        {
            "count": 1,
            "ratio": 1.0,
            "flag": True,
            "none": None,
            "text": "é\u2028",
            "nested": [1, {"a": [2.5]}],
        },
        {"nan": float("nan")},
        {"big": 2**70},
        {"pair": (1, 2)},
        {},
    ]
    served = [call("increment_counter", "1", **arguments) for arguments in tricky]
    for record in served:
        sessions.record(session, record)
    back = session.calls
    assert [r.call_id for r in back] == [r.call_id for r in served]
    for record, original in zip(back, tricky, strict=True):
        assert repr(record.arguments) == repr(original)  # repr: nan != nan, and 1 == 1.0 == True
        assert [type(v) for v in record.arguments.values()] == [type(v) for v in original.values()]
    assert [r.size for r in back] == [r.size for r in served]
    for arguments in tricky:  # a served call measures itself from the one encoding it keeps
        assert ToolCallRecord.served("t", None, arguments, "é", False, 0, 0).size == record_size(
            arguments, "é"
        )
    gc.collect()
    rows = session._calls or []
    assert [gc.is_tracked(row) for row in rows] == [False, True, True, True, False]


def test_a_served_call_keeps_the_arguments_as_the_upstream_received_them() -> None:
    """What ``Bridge.call_tool`` sent is the log's copy, byte for byte (not encoded and read back
    again), held in a buffer of its own size (orjson's output keeps the 4 KiB it was written into),
    the record's size is measured from it, and it reads back with every integer exact."""
    sessions = registry()
    session = open_session(sessions)
    arguments = {"count": 2**64 + 1, "text": "é"}
    sent = exactjson.dumps(arguments)
    record = ToolCallRecord.served("increment_counter", None, arguments, "ok", False, 0, 0, sent)
    kept = record.as_row()[3]
    assert kept == sent and sys.getsizeof(kept) == sys.getsizeof(b"") + len(sent)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = [
            ToolCallRecord.served("t", None, {"count": 1}, "", False, 0, 0, exactjson.dumps({"count": 1}))
            for _ in range(100)
        ]
        assert (tracemalloc.get_traced_memory()[0] - before) / len(held) < 1024
    finally:
        tracemalloc.stop()
    assert record.size == len(sent) + len("ok")
    sessions.record(session, record)
    assert repr(session.calls[0].arguments) == repr(arguments)


def test_max_calls_logged_drops_later_calls_and_names_them() -> None:
    sessions = registry(max_calls_logged=2)
    session = open_session(sessions)
    for name in ("increment_counter", "increment_counter", "get_counter_value"):
        sessions.record(session, call(name, "1"))
    assert [r.canonical_name for r in session.calls] == ["increment_counter"] * 2
    assert not session.log_complete
    assert session.dropped.count == 1 and session.calls_served == 3
    assert session.incomplete_reason() == (
        "the session log dropped 1 of 3 calls (#3 get_counter_value: max_calls_logged=2); "
        "recorded verify needs the whole log"
    )
    assert sessions.log_bytes == session.log_bytes == 2 * call(output="1").size


def test_max_calls_logged_zero_logs_nothing() -> None:
    sessions = registry(max_calls_logged=0)
    session = open_session(sessions)
    sessions.record(session, call())
    assert session.calls == [] and not session.log_complete and sessions.log_bytes == 0


def test_session_byte_cap_drops_the_call_that_does_not_fit_and_keeps_later_ones_that_do() -> None:
    sessions = registry(max_session_log_bytes=100)
    session = open_session(sessions)
    sessions.record(session, sized(60))
    sessions.record(session, sized(50, "big_tool"))  # 110 > 100
    sessions.record(session, sized(40))  # exactly 100: fits
    assert [r.size for r in session.calls] == [60, 40]
    assert session.log_bytes == sessions.log_bytes == 100
    assert [str(d) for d in session.dropped.first] == ["#2 big_tool: max_session_log_bytes=100"]
    assert session.incomplete_reason() == (
        "the session log dropped 1 of 3 calls (#2 big_tool: max_session_log_bytes=100); "
        "recorded verify needs the whole log"
    )


def test_one_call_larger_than_the_session_cap_is_dropped() -> None:
    sessions = registry(max_session_log_bytes=1000)
    session = open_session(sessions)
    sessions.record(session, call("increment_counter", "ok", pad="x" * 2000))
    assert session.calls == [] and session.log_bytes == 0 and sessions.log_bytes == 0
    assert "#1 increment_counter: max_session_log_bytes=1000" in (session.incomplete_reason() or "")


def test_global_budget_is_shared_across_sessions() -> None:
    sessions = registry(max_session_log_bytes=1000, max_log_bytes=150)
    a, b = open_session(sessions), open_session(sessions)
    sessions.record(a, sized(100))
    sessions.record(b, sized(40))
    sessions.record(b, sized(20, "get_counter_value"))  # 160 > 150 across both sessions
    assert a.log_complete and a.log_bytes == 100
    assert [r.size for r in b.calls] == [40] and not b.log_complete
    assert sessions.log_bytes == 140
    assert b.incomplete_reason() == (
        "the session log dropped 1 of 2 calls "
        "(#2 get_counter_value: max_log_bytes=150 across all sessions); recorded verify needs the whole log"
    )


@pytest.mark.parametrize("release", ["close", "expire", "lose", "sweep_expired"])
def test_global_budget_is_given_back_when_a_session_ends(release: str) -> None:
    sessions = registry(max_session_log_bytes=1000, max_log_bytes=150)
    ending, other = open_session(sessions), open_session(sessions)
    other.expires_at += 100  # outlives ``ending`` in the sweep case
    sessions.record(ending, sized(100))
    sessions.record(other, sized(50))
    sessions.record(other, sized(10))  # full: 160 > 150
    assert not other.log_complete and sessions.log_bytes == 150
    if release == "close":
        sessions.close(ending.sid)
    elif release == "expire":
        ending.expires_at = time.time() - 1
        with pytest.raises(SessionError, match="expired"):
            sessions.get(ending.sid, GENERATION)
    elif release == "lose":
        with pytest.raises(SessionLost):
            sessions.get(ending.sid, GENERATION + 1)
    else:
        assert sessions.sweep(now=ending.expires_at) == 1
    assert sessions.log_bytes == 50
    sessions.record(other, sized(100))  # fits again
    assert [r.size for r in other.calls] == [50, 100] and sessions.log_bytes == 150
    sessions.close(other.sid)
    assert sessions.log_bytes == 0


def test_lost_sessions_swept_by_generation_give_their_bytes_back() -> None:
    sessions = registry()
    for _ in range(3):
        sessions.record(open_session(sessions), sized(100))
    assert sessions.log_bytes == 300
    assert sessions.sweep(generation=GENERATION + 1) == 3
    assert sessions.log_bytes == 0


def test_a_call_finishing_after_its_session_ended_is_not_charged() -> None:
    sessions = registry()
    session = open_session(sessions)
    sessions.record(session, sized(100))
    sessions.close(session.sid)  # closed while a call was in flight
    sessions.record(session, sized(100))
    assert sessions.log_bytes == 0 and len(session.calls) == 1


def test_dropped_summary_names_the_first_few_and_counts_the_rest() -> None:
    sessions = registry(max_calls_logged=1)
    session = open_session(sessions)
    for index in range(DROPPED_SHOWN + 3):
        sessions.record(session, call(f"tool_{index}"))
    assert session.dropped.count == DROPPED_SHOWN + 2
    assert len(session.dropped.first) == DROPPED_SHOWN
    shown = ", ".join(f"#{i + 1} tool_{i}: max_calls_logged=1" for i in range(1, DROPPED_SHOWN + 1))
    assert session.incomplete_reason() == (
        f"the session log dropped {DROPPED_SHOWN + 2} of {DROPPED_SHOWN + 3} calls "
        f"({shown}, and 2 more); recorded verify needs the whole log"
    )
    assert "\n" not in (session.incomplete_reason() or "")


def test_registry_defaults_match_the_settings_defaults() -> None:
    settings = Settings(secret="x" * 32)
    sessions = SessionRegistry(settings.session_ttl_s, settings.max_sessions, settings.max_calls_logged)
    assert sessions.max_session_log_bytes == settings.max_session_log_bytes == 16 * 1024 * 1024
    assert sessions.max_log_bytes == settings.max_log_bytes == 256 * 1024 * 1024
    assert sessions.budget_bytes == settings.resolved_state_budget() == 128 * 1024 * 1024


# -- the lifecycle a training run drives: finished sessions, the state budget ----------------------


def test_a_finished_session_serves_only_a_repeated_verify_and_leaves_the_cap() -> None:
    sessions = registry(max_sessions=2)
    first, second = open_session(sessions), open_session(sessions)
    with pytest.raises(SessionCapReached):
        sessions.ensure_room()
    sessions.finish(first)
    sessions.ensure_room()  # a finished rollout does not count
    assert len(sessions) == 1 and sessions.finished == 1
    assert sessions.get(first.sid, GENERATION, finished_ok=True) is first  # a repeated /verify
    with pytest.raises(SessionEnded, match=f"session {first.sid} finished at .*: its tools no longer run"):
        sessions.get(first.sid, GENERATION)
    assert sessions.get(second.sid, GENERATION) is second
    assert sessions.close(first.sid) is first  # a finished session can still be closed
    with pytest.raises(SessionEnded, match="closed by /close_session"):
        sessions.get(first.sid, GENERATION, finished_ok=True)


def test_finished_sessions_never_refuse_a_seed_and_keep_memory_bounded() -> None:
    """A stream of rollouts that are verified and never closed: every seed is accepted, and the
    bytes held stay under the budget (the oldest finished sessions are released, named later)."""
    budget = 1024 * 1024
    sessions = registry(max_sessions=10, budget_bytes=budget)
    seeded = []
    for _ in range(5000):
        session = open_session(sessions)
        sessions.record(session, sized(100))
        sessions.finish(session)
        seeded.append(session.sid)
        assert sessions.state_bytes <= budget
    assert len(sessions) == 0 and 0 < sessions.finished < 5000
    assert sessions.get(seeded[-1], GENERATION, finished_ok=True).sid == seeded[-1]
    with pytest.raises(
        SessionEnded, match=rf"finished, then released to make room under state_budget_bytes={budget}"
    ):
        sessions.get(seeded[len(seeded) - sessions.finished - 1], GENERATION, finished_ok=True)
    evicted = sessions.take_released()
    assert len(evicted) == 5000 - sessions.finished and sessions.take_released() == []
    assert sessions.ended["evicted"] == len(evicted)


def test_a_seed_is_refused_only_when_unfinished_sessions_fill_the_budget() -> None:
    budget = 1024 * 1024
    sessions = registry(max_sessions=100_000, budget_bytes=budget)
    row = b"x" * 100_000
    held = []
    with pytest.raises(SessionBudgetFull) as refused:
        while True:
            held.append(sessions.create(row, "jar=1", ToolSet(tools={}), GENERATION))
    assert str(refused.value).startswith(f"session state budget full: {len(held)} unfinished sessions hold ")
    assert str(refused.value).endswith(
        f"of state_budget_bytes={budget}; retry later or raise state_budget_bytes"
    )
    assert len(held) == (budget) // (SESSION_OVERHEAD + len(row) + len("jar=1"))
    sessions.finish(held[0])  # finished: released for the next seed
    sessions.ensure_room(len(row))
    assert sessions.get(held[1].sid, GENERATION) is held[1]  # unfinished ones are never released
    assert SEED_HEADROOM > 0


def test_bytes_charged_follow_what_a_session_holds() -> None:
    sessions = registry()
    session = open_session(sessions)
    base = SESSION_OVERHEAD + len(b'{"initial_count": 0}') + len("jar=1")
    assert session.size == sessions.state_bytes == base
    sessions.set_token(session, "t" * 400)
    cookie = "jar=" + "1" * 100
    sessions.set_cookie(session, cookie)
    sessions.record(session, sized(70))
    assert session.size == sessions.state_bytes == base + 400 + len(cookie) - len("jar=1") + 70
    sessions.finish(session)
    assert sessions.state_bytes == session.size  # a finished session keeps its row, cookie, token, log
    sessions.close(session.sid)
    assert sessions.state_bytes == TOMBSTONE_BYTES


def test_expired_finished_and_unfinished_sessions_are_queued_for_upstream_release() -> None:
    sessions = registry(ttl_s=10)
    finished, unfinished, closed = open_session(sessions), open_session(sessions), open_session(sessions)
    sessions.finish(finished)
    sessions.close(closed.sid)  # the client closed it: the upstream got its /close_session already
    assert sessions.sweep(now=time.time() + 11) == 2
    assert {s.sid for s in sessions.take_released()} == {finished.sid, unfinished.sid}
    assert sessions.ended == {"closed": 1, "expired": 2, "evicted": 0, "lost": 0}


def test_retry_answers_past_the_last_64_are_released_and_their_keys_refused_not_reapplied() -> None:
    from bridge import retries
    from bridge.outcomes import ToolOutcome

    async def run() -> None:
        sessions = registry()
        session = open_session(sessions)
        loop = asyncio.get_running_loop()
        keys = [retries.key_of(f"k{i}") for i in range(retries.ANSWERS_KEPT + 6)]
        for i, key in enumerate(keys):
            assert key is not None
            answer: asyncio.Future[ToolOutcome] = loop.create_future()
            answer.set_result(ToolOutcome(200, b"x" * 100, "application/json", False, [], str(i)))
            digest = retries.fingerprint("increment_counter", exactjson.dumps({"count": i}))
            retries.remember(sessions, session, key, "increment_counter", digest, answer)
            await asyncio.sleep(0)  # the answer's bytes are charged once it is settled

        def digest_of(count: int) -> bytes:
            return retries.fingerprint("increment_counter", exactjson.dumps({"count": count}))

        newest = retries.previous(session, keys[-1], "increment_counter", digest_of(len(keys) - 1))
        assert (
            newest is not None
            and newest.answer is not None
            and newest.answer.result().message == str(len(keys) - 1)
        )
        with pytest.raises(
            retries.RetryRefused,
            match="idempotency key 'k0' was already answered and its answer is no longer held",
        ):
            retries.previous(session, keys[0], "increment_counter", digest_of(0))
        with pytest.raises(retries.RetryRefused, match="already used for another call"):
            retries.previous(session, keys[1], "increment_counter", digest_of(99))
        held = sum(a.size for a in session.retries.values())  # type: ignore[union-attr]
        assert held == len(keys) * retries.ATTEMPT_BYTES + retries.ANSWERS_KEPT * 100
        sessions.finish(session)  # a finished session drops them all
        assert session.retries is None and sessions.state_bytes == session.size

    asyncio.run(run())
