"""The session processor, pure (DictState, no I/O): each rule once, by name.

Untagged transcript matching, retries, side calls, the tagged path, expiry in event time
and by the open-session cap, redelivery and erasure; the properties over random
interleavings are in test_sessions_properties.py.
"""

from __future__ import annotations

import json

from reef.core.events import Event, RecordErased, SessionExpired, TurnCompleted
from reef.core.ids import derived_id
from tests.support.sessions import assistant, at, exchange, fresh, tool, user


def completed(events: list[Event]) -> TurnCompleted:
    assert len(events) == 1 and isinstance(events[0], TurnCompleted), events
    return events[0]


Q1 = [user("what is 2+2?")]
T2 = [*Q1, assistant("5"), user("no, try again")]


def test_an_untagged_request_that_extends_a_session_completes_its_last_turn() -> None:
    proc, state = fresh()
    assert proc.step(state, exchange("r1", 0, Q1, "5", release="rel-1")) == []
    turn = completed(proc.step(state, exchange("r2", 10, T2, "4")))
    assert turn.event_id == derived_id("turn-completed", "demo", "r1", "r2")
    assert (turn.session_id, turn.turn_index) == ("r1", 0)
    assert (turn.receipt_id, turn.next_receipt_id) == ("r1", "r2")
    assert (turn.next_state_role, turn.matched_by) == ("user", "transcript")
    assert turn.release_id == "rel-1" and turn.session_tag is None
    assert turn.occurred_at == at(10)
    third = [*T2, assistant("4"), user("thanks")]
    turn = completed(proc.step(state, exchange("r3", 20, third, "you're welcome")))
    assert (turn.receipt_id, turn.next_receipt_id, turn.turn_index) == ("r2", "r3", 1)


def test_a_tool_result_is_the_next_state_with_its_role() -> None:
    proc, state = fresh()
    proc.step(state, exchange("r1", 0, Q1, "calling search"))
    nxt = [*Q1, assistant("calling search"), tool("search says 4")]
    assert completed(proc.step(state, exchange("r2", 1, nxt, "4"))).next_state_role == "tool"


def test_an_identical_resend_is_a_retry_and_the_first_receipt_keeps_the_slot() -> None:
    proc, state = fresh()
    proc.step(state, exchange("r1", 0, Q1, "5"))
    assert proc.step(state, exchange("r1-retry", 1, Q1, "4")) == []
    assert state.get("fate/r1-retry") == "retry"
    turn = completed(proc.step(state, exchange("r2", 2, T2, "4")))
    assert turn.receipt_id == "r1"


def test_a_request_that_does_not_extend_by_an_answer_and_a_message_opens_a_session() -> None:
    proc, state = fresh()
    proc.step(state, exchange("r1", 0, Q1, "5"))
    assert proc.step(state, exchange("r2", 1, [*Q1, user("hello?")], "hi")) == []
    no_assistant = [*Q1, user("x"), user("y")]
    assert proc.step(state, exchange("r3", 2, no_assistant, "z")) == []
    assert state.get("fate/r2") == {"session": "r2", "turn": 0}
    assert state.get("fate/r3") == {"session": "r3", "turn": 0}
    assert state.get("open/demo")["count"] == 3


def test_side_calls_never_become_turns() -> None:
    proc, state = fresh()
    proc.step(state, exchange("r1", 0, Q1, "5"))
    title = [*Q1, assistant("5"), user("write a title")]
    assert proc.step(state, exchange("side-1", 1, title, "Maths", tools=False)) == []
    tagged = exchange("side-2", 2, T2, "4", tags={"turn-type": "side"})
    assert proc.step(state, tagged) == []
    assert state.get("fate/side-1") == {"side": "no-tools"}
    assert state.get("fate/side-2") == {"side": "tagged"}
    assert completed(proc.step(state, exchange("r2", 3, T2, "4"))).receipt_id == "r1"


def test_turn_type_main_forces_a_request_without_tools_to_be_a_turn() -> None:
    proc, state = fresh()
    main = {"turn-type": "main"}
    proc.step(state, exchange("r1", 0, Q1, "5", tools=False, tags=main))
    assert completed(proc.step(state, exchange("r2", 1, T2, "4", tools=False, tags=main)))


def test_tagged_turns_bind_in_arrival_order_without_a_transcript_relation() -> None:
    proc, state = fresh()
    tag = {"session": "agent-7"}
    proc.step(state, exchange("r1", 0, Q1, "5", tags=tag))
    other = [user("a different story")]
    turn = completed(proc.step(state, exchange("r2", 1, other, "ok", tags=tag)))
    assert (turn.receipt_id, turn.next_receipt_id) == ("r1", "r2")
    assert (turn.matched_by, turn.session_tag, turn.session_id) == ("tag", "agent-7", "r1")
    assert proc.step(state, exchange("r2-retry", 2, other, "ok", tags=tag)) == []
    assert proc.step(state, exchange("u1", 3, other, "ok")) == []  # untagged: its own session
    assert state.get("fate/u1") == {"session": "u1", "turn": 0}


def test_a_session_idle_past_the_ttl_in_event_time_expires_and_its_last_turn_never_completes() -> (
    None
):
    proc, state = fresh(max_open_sessions=10)
    proc.step(state, exchange("r1", 0, Q1, "5"))
    ended = proc.step(state, exchange("x1", 901, [user("unrelated")], "ok"))
    assert ended == [
        SessionExpired(
            event_id=derived_id("session-expired", "demo", "r1", "r1"),
            scenario="demo",
            occurred_at=at(901),
            producer="reef-sessions",
            session_id="r1",
            last_receipt_id="r1",
            turns=1,
            reason="idle",
        )
    ]
    assert proc.step(state, exchange("r2", 902, T2, "4")) == []  # opens a new session
    assert state.get("fate/r2") == {"session": "r2", "turn": 0}


def test_a_session_within_the_ttl_binds_and_time_never_runs_backwards() -> None:
    proc, state = fresh()
    proc.step(state, exchange("r1", 0, Q1, "5"))
    proc.step(state, exchange("x1", 800, [user("unrelated")], "ok"))
    # an exchange stamped earlier (another replica's clock) does not move the clock back
    assert completed(proc.step(state, exchange("r2", 899, T2, "4"))).receipt_id == "r1"
    assert state.get("open/demo")["clock"] == int(at(899).timestamp() * 1000)


def test_opening_beyond_max_open_sessions_evicts_the_least_recently_active() -> None:
    proc, state = fresh(max_open_sessions=2)
    proc.step(state, exchange("a1", 0, [user("a")], "a!"))
    proc.step(state, exchange("b1", 1, [user("b")], "b!"))
    # a is active again: b is now the least recently active
    proc.step(state, exchange("a2", 2, [user("a"), assistant("a!"), user("more a")], "a2!"))
    (ended,) = proc.step(state, exchange("c1", 3, [user("c")], "c!"))
    assert isinstance(ended, SessionExpired)
    assert (ended.session_id, ended.last_receipt_id, ended.reason) == ("b1", "b1", "evicted")
    late_b = [user("b"), assistant("b!"), user("more b")]
    assert proc.step(state, exchange("b2", 4, late_b, "b2!")) != []  # evicts a, binds nothing
    assert state.get("fate/b2") == {"session": "b2", "turn": 0}


def test_among_matching_sessions_the_one_whose_answer_is_quoted_wins_then_the_newest() -> None:
    longer = [*Q1, assistant("5"), user("no")]
    request = [*longer, assistant("4"), user("thanks")]
    proc, state = fresh()
    proc.step(state, exchange("b", 0, longer, "4"))  # older; its answer is quoted
    proc.step(state, exchange("a", 1, Q1, "7"))  # newer; "5" after Q1 is not its answer
    assert completed(proc.step(state, exchange("r", 2, request, "ok"))).receipt_id == "b"
    proc, state = fresh()
    proc.step(state, exchange("b", 0, longer, "8"))
    proc.step(state, exchange("a", 1, Q1, "7"))  # neither answer quoted: the newest wins
    assert completed(proc.step(state, exchange("r", 2, request, "ok"))).receipt_id == "a"


def test_a_redelivered_exchange_yields_nothing_and_changes_nothing() -> None:
    proc, state = fresh()
    proc.step(state, exchange("r1", 0, Q1, "5"))
    second = exchange("r2", 1, T2, "4")
    assert completed(proc.step(state, second))
    before = json.dumps(state.data, sort_keys=True)
    assert proc.step(state, second) == []
    assert proc.step(state, exchange("r1", 0, Q1, "5")) == []
    assert json.dumps(state.data, sort_keys=True) == before


def test_incomplete_exchanges_are_not_turns() -> None:
    proc, state = fresh()
    assert proc.step(state, exchange("r1", 0, Q1, "5", complete=False)) == []
    assert state.data == {}


def test_an_erased_turn_is_never_completed_but_its_session_goes_on() -> None:
    proc, state = fresh()
    proc.step(state, exchange("r1", 0, Q1, "5"))
    erased = RecordErased(
        event_id="e1", scenario="demo", occurred_at=at(1), producer="t", record_id="r1"
    )
    assert proc.step(state, erased) == []
    assert proc.step(state, exchange("r2", 2, T2, "4")) == []
    third = [*T2, assistant("4"), user("thanks")]
    assert completed(proc.step(state, exchange("r3", 3, third, "np"))).receipt_id == "r2"


def test_records_without_fingerprints_join_tagged_sessions_only() -> None:
    from dataclasses import replace

    proc, state = fresh()
    old = replace(exchange("o1", 0, Q1, "5"), message_fingerprints=None, has_tools=None)
    assert proc.step(state, old) == []
    assert state.get("fate/o1") == "unmatched"
    tag = {"session": "t"}
    proc.step(state, replace(exchange("t1", 1, Q1, "5", tags=tag), message_fingerprints=None))
    nxt = replace(exchange("t2", 2, T2, "4", tags=tag), message_fingerprints=None)
    turn = completed(proc.step(state, nxt))
    assert (turn.receipt_id, turn.next_state_role) == ("t1", None)
