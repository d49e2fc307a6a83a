"""Receipts of one scenario never join a report of another, even when the 8-hex scenario
tag of a receipt collides (a scenario name crafted to share another's tag: 32 bits of a
hash, within reach of a brute force)."""

from __future__ import annotations

from reef.core.events import ReportRejected, SampleJoined
from reef.core.ids import scenario_tag
from reef_dev.events import inference, receipt, report
from tests.support.join import at, fresh, only

S = "alpha"
COLLIDER = "crafted-collider"


def colliding_receipt(n: int) -> str:
    """A receipt recorded under COLLIDER that carries S's tag (what a collision gives)."""
    forged = receipt(S, n)
    assert forged.startswith(scenario_tag(S)) and scenario_tag(COLLIDER) != scenario_tag(S)
    return forged


def test_a_recorded_receipt_of_another_scenario_with_our_tag_is_foreign() -> None:
    join, state = fresh()
    theirs = colliding_receipt(1)
    join.step(state, inference(COLLIDER, theirs, at(0)))
    out = only(join.step(state, report(S, "r", [theirs], at(1))))
    assert isinstance(out, ReportRejected) and out.reason == "foreign_reference", out
    assert state.get(f"consumed/{theirs}") is None


def test_a_parked_report_does_not_join_a_foreign_record_that_arrives_later() -> None:
    join, state = fresh()
    theirs = colliding_receipt(2)
    ours = receipt(S, 3)
    assert join.step(state, report(S, "r", [theirs], at(0))) == []  # parked: not recorded yet
    join.step(state, inference(COLLIDER, theirs, at(1)))
    out = only(join.step(state, inference(S, ours, at(2))))  # retries S's parked reports
    assert isinstance(out, ReportRejected) and out.reason == "foreign_reference", out
    assert state.get(f"consumed/{theirs}") is None


def test_our_own_receipts_still_join() -> None:
    join, state = fresh()
    ours = receipt(S, 4)
    join.step(state, inference(S, ours, at(0)))
    assert isinstance(only(join.step(state, report(S, "r", [ours], at(1)))), SampleJoined)
