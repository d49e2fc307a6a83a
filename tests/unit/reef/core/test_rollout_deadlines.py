"""Deadlines on the wall clock (reef.core.rollout_deadlines): a live rollout past its
max_duration_s gets the controller's own decision, rolled back, whoever appends it."""

from __future__ import annotations

import json
from dataclasses import replace

from reef.core.rollout_control import decision_id
from reef.core.rollout_deadlines import overdue_decisions
from tests.support.rollouts import at, rollout_book

MAX_S = 3600.0  # rollout_book's policy


def deadline() -> float:
    """Seconds after T0 at which rollout_book's rollout is due."""
    current = rollout_book().scenarios["shop"].current
    assert current is not None
    return (current.started_at - at(0)).total_seconds() + MAX_S


def test_nothing_is_due_before_the_deadline() -> None:
    assert overdue_decisions(rollout_book(), at(deadline() - 0.001), "api") == []


def test_a_rollout_past_its_deadline_is_rolled_back_under_the_controllers_id() -> None:
    book = rollout_book()
    now = at(deadline() + 5)
    (due,) = overdue_decisions(book, now, "api-1", {"r1": {"pairs": 3}, "rx": {"x": 1}})
    assert due.event_id == decision_id("shop", "r1")
    assert (due.scenario, due.rollout_id, due.outcome, due.reason) == (
        "shop",
        "r1",
        "rolled_back",
        "max_duration",
    )
    assert json.loads(due.figures_json) == {"pairs": 3, "elapsed_s": MAX_S + 5}
    assert due.occurred_at == now and due.producer == "api-1"

    book.apply(due)
    view = book.scenarios["shop"]
    assert view.active is None and view.marks("c1") == ["rolled_back"]
    assert overdue_decisions(book, at(deadline() + 6), "api-1") == []  # decided once


def test_whichever_decision_reaches_the_log_first_stands() -> None:
    deadline_first = rollout_book()
    (due,) = overdue_decisions(deadline_first, at(deadline()), "api")
    controllers = replace(due, outcome="promoted", reason="statistic")  # the same id
    deadline_first.apply(due)
    deadline_first.apply(controllers)
    current = deadline_first.scenarios["shop"].current
    assert current is not None and (current.status, current.reason) == (
        "rolled_back",
        "max_duration",
    )

    controller_first = rollout_book()
    controller_first.apply(controllers)
    assert overdue_decisions(controller_first, at(deadline()), "api") == []
    controller_first.apply(due)
    current = controller_first.scenarios["shop"].current
    assert current is not None and current.status == "promoted"
