"""The join processor, pure (DictState, no I/O): each rule once, by name.

Acceptance, rejection reasons, conflicts, parking and expiry in event time, session
merging on and off, redelivery and events the join does not read; the properties over
random interleavings are in test_join_properties.py.
"""

from __future__ import annotations

import json
from datetime import timedelta

from reef.core.events import Event, ReportRejected, SampleJoined
from reef.core.ids import derived_id
from reef.core.join import JoinProcessor
from reef.core.state import DictState
from reef_dev.events import chat_request, chat_response, inference, receipt, report
from tests.support.join import at, fate_ids, fresh, only, snapshot

# ---------------------------------------------------------------------------
# Examples: each rule once, by name

S = "demo"
OTHER = "elsewhere"


def test_a_report_on_a_recorded_exchange_joins() -> None:
    join, state = fresh()
    a = receipt(S, 1)
    assert join.step(state, inference(S, a, at(0), release="rel-7")) == []
    submitted = report(S, "r1", [a], at(1), score=0.5, feedback={"x": 1})
    sample = only(join.step(state, submitted))
    assert isinstance(sample, SampleJoined)
    assert sample.event_id == derived_id("sample", S, "r1", submitted.content_hash)
    assert sample.report_id == "r1"
    assert sample.references == [a]
    assert sample.release_ids == ["rel-7"]
    assert sample.score == 0.5
    assert json.loads(sample.feedback_json) == {"x": 1}
    (turn,) = json.loads(sample.trajectory_json)
    assert turn["receipt"] == a
    assert turn["request"]["messages"][0]["content"] == a
    assert turn["response"]["choices"][0]["message"]["content"] == f"answer {a}"
    assert sample.occurred_at == at(1)


def test_release_ids_are_listed_in_trajectory_order_without_repeats() -> None:
    join, state = fresh()
    refs = [receipt(S, n) for n in range(4)]
    for n, (r, rel) in enumerate(zip(refs, ["rel-2", "rel-1", "rel-2", "rel-3"], strict=True)):
        join.step(state, inference(S, r, at(n), release=rel))
    sample = only(join.step(state, report(S, "r", list(reversed(refs)), at(10))))
    assert isinstance(sample, SampleJoined)
    assert sample.references == refs  # event-time order, whatever the report's order
    assert sample.release_ids == ["rel-2", "rel-1", "rel-3"]


def rejection(events: list[Event]) -> tuple[str, str | None]:
    out = only(events)
    assert isinstance(out, ReportRejected), out
    return out.reason, out.detail


def test_no_references_is_rejected() -> None:
    join, state = fresh()
    assert rejection(join.step(state, report(S, "r", [], at(0))))[0] == "no_references"


def test_a_receipt_of_another_scenario_is_a_foreign_reference() -> None:
    join, state = fresh()
    theirs = receipt(OTHER, 1)
    join.step(state, inference(OTHER, theirs, at(0)))
    assert rejection(join.step(state, report(S, "r", [theirs], at(1))))[0] == "foreign_reference"
    ours = receipt(S, 1)
    join.step(state, inference(S, ours, at(2)))
    events = join.step(state, report(S, "r2", [ours, "not-a-receipt"], at(3)))
    assert rejection(events)[0] == "foreign_reference"
    assert state.get(f"consumed/{ours}") is None  # a rejected report consumes nothing


def test_a_repeated_reference_is_rejected() -> None:
    join, state = fresh()
    a = receipt(S, 1)
    join.step(state, inference(S, a, at(0)))
    assert rejection(join.step(state, report(S, "r", [a, a], at(1))))[0] == "duplicate_reference"


def test_a_consumed_receipt_is_never_trained_twice() -> None:
    join, state = fresh()
    a, b = receipt(S, 1), receipt(S, 2)
    join.step(state, inference(S, a, at(0)))
    join.step(state, inference(S, b, at(0)))
    assert isinstance(only(join.step(state, report(S, "r1", [a], at(1)))), SampleJoined)
    assert rejection(join.step(state, report(S, "r2", [b, a], at(2))))[0] == "already_consumed"
    # b was not consumed by the rejected report: another report may still use it
    assert isinstance(only(join.step(state, report(S, "r3", [b], at(3)))), SampleJoined)


def test_an_identical_resend_is_a_no_op_and_other_content_a_conflict() -> None:
    join, state = fresh()
    a = receipt(S, 1)
    join.step(state, inference(S, a, at(0)))
    first = report(S, "r1", [a], at(1), score=1.0)
    assert isinstance(only(join.step(state, first)), SampleJoined)
    assert join.step(state, report(S, "r1", [a], at(5), score=1.0)) == []  # resend, later
    changed = report(S, "r1", [a], at(6), score=0.0)
    out = only(join.step(state, changed))
    assert isinstance(out, ReportRejected) and out.reason == "conflict"
    assert out.event_id == fate_ids(changed)[1]
    # the conflicting content redelivered, or resent, is decided already
    assert join.step(state, changed) == []
    assert join.step(state, report(S, "r1", [a], at(7), score=0.0)) == []
    # the same id in another scenario is another report
    b = receipt(OTHER, 1)
    join.step(state, inference(OTHER, b, at(8)))
    assert isinstance(only(join.step(state, report(OTHER, "r1", [b], at(9)))), SampleJoined)


def test_a_conflict_with_a_parked_report_rejects_both() -> None:
    join, state = fresh()
    a = receipt(S, 1)
    original = report(S, "r1", [a], at(0), score=1.0)
    assert join.step(state, original) == []  # parked: a is not recorded yet
    changed = report(S, "r1", [a], at(1), score=0.0)
    out = join.step(state, changed)
    assert [(o.event_id, o.reason) for o in out if isinstance(o, ReportRejected)] == [
        (fate_ids(original)[1], "conflict"),
        (fate_ids(changed)[1], "conflict"),
    ]
    assert join.step(state, inference(S, a, at(2))) == []  # nothing is waiting for it now
    assert state.get(f"parked/{S}") is None
    assert state.get(f"consumed/{a}") is None


def test_a_late_reference_parks_the_report_until_it_arrives() -> None:
    join, state = fresh()
    a, b = receipt(S, 1), receipt(S, 2)
    join.step(state, inference(S, a, at(0)))
    assert join.step(state, report(S, "r1", [a, b], at(1), score=0.25)) == []
    assert [p["id"] for p in state.get(f"parked/{S}")] == ["r1"]
    assert state.get(f"consumed/{a}") is None  # parked reports hold no receipts
    sample = only(join.step(state, inference(S, b, at(60))))
    assert isinstance(sample, SampleJoined)
    assert sample.references == [a, b]
    assert sample.score == 0.25
    assert sample.occurred_at == at(1)  # the report's time: replay reproduces it exactly
    assert state.get(f"parked/{S}") is None  # empty lists are deleted


def test_parked_reports_joining_the_same_receipt_are_decided_in_arrival_order() -> None:
    join, state = fresh()
    a = receipt(S, 1)
    assert join.step(state, report(S, "r1", [a], at(0))) == []
    assert join.step(state, report(S, "r2", [a], at(1))) == []
    out = join.step(state, inference(S, a, at(2)))
    assert [type(o).__name__ for o in out] == ["SampleJoined", "ReportRejected"]
    assert isinstance(out[0], SampleJoined) and out[0].report_id == "r1"
    assert isinstance(out[1], ReportRejected) and out[1].reason == "already_consumed"


def test_a_parked_report_expires_with_event_time_not_wall_time() -> None:
    join, state = fresh(park_timeout=timedelta(seconds=30))
    a = receipt(S, 1)
    assert join.step(state, report(S, "r1", [a], at(0))) == []
    # events of another scenario do not advance this scenario's clock
    assert join.step(state, inference(OTHER, receipt(OTHER, 1), at(3600))) == []
    # the deadline itself is not past yet
    assert join.step(state, inference(S, receipt(S, 2), at(30))) == []
    reason, detail = rejection(join.step(state, inference(S, receipt(S, 3), at(30.001))))
    assert reason == "unknown_reference" and detail == "referenced record never arrived"
    assert state.get(f"parked/{S}") is None
    # arriving after the expiry is too late: the report keeps its fate
    assert join.step(state, inference(S, a, at(31))) == []
    assert state.get(f"consumed/{a}") is None


def test_expiry_is_checked_before_the_awaited_record_is_applied() -> None:
    join, state = fresh(park_timeout=timedelta(seconds=30))
    a = receipt(S, 1)
    join.step(state, report(S, "r1", [a], at(0)))
    # the record itself arrives too late: the report expires first
    assert rejection(join.step(state, inference(S, a, at(31))))[0] == "unknown_reference"
    # a later report may still use the exchange
    assert isinstance(only(join.step(state, report(S, "r2", [a], at(32)))), SampleJoined)


def test_a_full_parking_lot_rejects_at_once() -> None:
    join, state = fresh(max_parked=1)
    assert join.step(state, report(S, "r1", [receipt(S, 1)], at(0))) == []
    reason, detail = rejection(join.step(state, report(S, "r2", [receipt(S, 2)], at(1))))
    assert reason == "unknown_reference" and detail == "too many reports waiting"


def test_an_incomplete_exchange_cannot_be_joined() -> None:
    join, state = fresh(park_timeout=timedelta(seconds=10))
    a = receipt(S, 1)
    join.step(state, inference(S, a, at(0), complete=False))
    assert join.step(state, report(S, "r1", [a], at(1))) == []  # waits: nothing to train on
    assert rejection(join.step(state, inference(S, receipt(S, 2), at(12))))[0] == (
        "unknown_reference"
    )


def _conversation(merge: bool) -> tuple[JoinProcessor, DictState, list[str]]:
    join, state = fresh(merge_sessions=merge)
    first, second, third = receipt(S, 1), receipt(S, 2), receipt(S, 3)
    u1 = {"role": "user", "content": "plan a trip"}
    a1 = {"role": "assistant", "content": "where to?"}
    u2 = {"role": "user", "content": "Lisbon"}
    a2 = {"role": "assistant", "content": "when?"}
    u3 = {"role": "user", "content": [{"type": "text", "text": "May"}]}  # block form
    join.step(
        state,
        inference(
            S,
            first,
            at(0),
            release="rel-1",
            request=chat_request([u1]),
            response=chat_response("where to?"),
        ),
    )
    # an unrelated exchange in between: not part of the trajectory
    join.step(state, inference(S, receipt(S, 9), at(1), request=chat_request([u2])))
    join.step(
        state,
        inference(
            S,
            second,
            at(2),
            release="rel-2",
            request=chat_request([u1, a1, u2]),
            response=chat_response("when?"),
        ),
    )
    join.step(
        state,
        inference(
            S,
            third,
            at(3),
            release="rel-2",
            request=chat_request([u1, a1, u2, a2, u3]),
            response=chat_response("booked"),
        ),
    )
    return join, state, [first, second, third]


def test_session_merging_on_yields_the_whole_trajectory_in_order() -> None:
    join, state, turns = _conversation(merge=True)
    sample = only(join.step(state, report(S, "r1", [turns[-1]], at(10))))
    assert isinstance(sample, SampleJoined)
    assert sample.references == turns
    trajectory = json.loads(sample.trajectory_json)
    assert [t["receipt"] for t in trajectory] == turns
    assert [t["response"]["choices"][0]["message"]["content"] for t in trajectory] == [
        "where to?",
        "when?",
        "booked",
    ]
    assert sample.release_ids == ["rel-1", "rel-2"]
    # every turn is consumed: a report on an earlier turn is already consumed
    assert rejection(join.step(state, report(S, "r2", [turns[0]], at(11))))[0] == (
        "already_consumed"
    )


def test_session_merging_stops_at_a_consumed_turn() -> None:
    join, state, turns = _conversation(merge=True)
    first = only(join.step(state, report(S, "r1", [turns[0]], at(10))))
    assert isinstance(first, SampleJoined) and first.references == [turns[0]]
    rest = only(join.step(state, report(S, "r2", [turns[2]], at(11))))
    assert isinstance(rest, SampleJoined) and rest.references == turns[1:]


def test_session_merging_off_joins_only_the_referenced_exchange() -> None:
    join, state, turns = _conversation(merge=False)
    sample = only(join.step(state, report(S, "r1", [turns[-1]], at(10))))
    assert isinstance(sample, SampleJoined)
    assert sample.references == [turns[-1]]
    assert isinstance(only(join.step(state, report(S, "r2", [turns[0]], at(11)))), SampleJoined)


def test_session_merging_across_dialects_and_a_system_prompt() -> None:
    join, state = fresh(merge_sessions=True)
    first, second = receipt(S, 1), receipt(S, 2)
    request1 = {"system": "be brief", "messages": [{"role": "user", "content": "hi"}]}
    response1 = {"type": "message", "content": [{"type": "text", "text": "hello"}]}
    request2 = {
        "system": [{"type": "text", "text": "be brief"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "bye"},
        ],
    }
    join.step(state, inference(S, first, at(0), request=request1, response=response1))
    join.step(
        state,
        inference(
            S, second, at(1), request=request2, response={"type": "message", "content": "bye!"}
        ),
    )
    sample = only(join.step(state, report(S, "r", [second], at(2))))
    assert isinstance(sample, SampleJoined) and sample.references == [first, second]


def test_redelivered_events_are_no_ops() -> None:
    join, state = fresh(park_timeout=timedelta(seconds=30))
    a, b = receipt(S, 1), receipt(S, 2)
    events: list[Event] = [
        inference(S, a, at(0)),
        report(S, "r1", [a], at(1)),
        report(S, "r2", [b], at(2)),  # parks
        report(S, "r3", [a], at(3)),  # already consumed
        report(S, "r1", [a], at(4), score=0.0),  # conflict
        report(S, "r4", [], at(5)),
        inference(S, receipt(S, 3), at(40)),  # expires r2
    ]
    for event in events:
        join.step(state, event)
        before = snapshot(state)
        assert join.step(state, event) == []
        assert snapshot(state) == before
    before = snapshot(state)
    for event in events:
        assert join.step(state, event) == []
    assert snapshot(state) == before


def test_events_the_join_does_not_read_are_ignored() -> None:
    join, state = fresh()
    sample = SampleJoined(
        event_id="x",
        scenario=S,
        occurred_at=at(0),
        producer="t",
        report_id="r",
        references=[],
        trajectory_json="[]",
        score=1.0,
        feedback_json="{}",
        metadata_json="{}",
        release_ids=[],
    )
    assert join.step(state, sample) == []
    assert state.data == {}
