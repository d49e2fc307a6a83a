"""The rollout fold and its validate (reef.core.rollouts): one test per rule of the
module docstring, the refusal reasons, and replay equality over random workloads (the
same events folded twice, with redeliveries, or with scenarios interleaved otherwise
give the same state)."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reef.core.events import Event, RolloutDecided, RolloutStarted
from reef.core.rollouts import RolloutPolicy, fold, validate
from tests.support.rollouts import committed, decided, rollout_book, started


def test_without_a_rollout_the_fold_follows_the_chain_head() -> None:
    book = fold([committed("shop", "h0", operation="creation"), committed("shop", "h1")])
    view = book.scenarios["shop"]
    assert view.head == "h1"
    assert view.active is None and view.current is None
    assert view.held == set()


def test_a_start_makes_an_active_rollout_of_head_candidate_and_share() -> None:
    view = rollout_book(share=0.2).scenarios["shop"]
    active = view.active
    assert active is not None
    assert (active.head_release_id, active.candidate_release_id) == ("h0", "c1")
    assert active.policy == RolloutPolicy(
        mode="canary", share=0.2, min_exchanges=50, max_duration_s=3600.0, alpha=0.05
    )
    assert view.head == "h0"  # the chain's head does not move


def test_a_promotion_routes_to_the_candidate_until_the_chain_commits_it() -> None:
    book = rollout_book()
    book.apply(decided("shop", "r1", "promoted", "statistic", seconds=10))
    view = book.scenarios["shop"]
    assert view.active is None
    assert view.promotion_pending is not None and view.promotion_pending.reason == "statistic"
    assert validate(book, started("shop", "r2", "c1", "h0")) == "promotion_pending"

    book.apply(committed("shop", "p2", operation="promote", target="c1", seconds=11))
    assert view.head == "p2" and view.promotion_pending is None
    assert "c1" not in view.held
    assert view.marks("c1") == ["promoted"]


def test_a_rolled_back_candidate_stays_held_and_marked_and_is_not_tried_again() -> None:
    book = rollout_book()
    book.apply(decided("shop", "r1", "rolled_back", "max_duration", seconds=3600))
    view = book.scenarios["shop"]
    assert view.active is None and view.head == "h0"
    assert "c1" in view.held and view.marks("c1") == ["rolled_back"]
    current = view.current
    assert current is not None and current.ended_at is not None
    assert validate(book, started("shop", "r2", "c1", "h0")) == "candidate_rolled_back"


def test_a_decision_on_an_unknown_or_ended_rollout_is_ignored() -> None:
    book = rollout_book()
    view = book.scenarios["shop"]
    before = copy.deepcopy(view.rollouts)
    unknown = decided("shop", "nope", "promoted")
    assert validate(book, unknown) == "unknown_rollout"
    book.apply(unknown)
    assert view.rollouts == before

    book.apply(decided("shop", "r1", "rolled_back", "statistic"))
    after = copy.deepcopy(view.rollouts)
    again = decided("shop", "r1", "promoted", "manual")  # a later, contrary decision
    assert validate(book, again) == "rollout_ended"
    book.apply(again)
    book.apply(decided("shop", "r1", "rolled_back", "statistic"))  # a redelivery
    assert view.rollouts == after != before


def test_a_refused_event_stays_refused_when_a_copy_comes_later() -> None:
    """A producer's retry may land after the state has changed: it counts once, first."""
    book = fold([committed("shop", "h0", operation="creation")])
    early = started("shop", "r1", "c1", "h0")
    assert validate(book, early) == "unknown_candidate"
    book.apply(early)
    book.apply(committed("shop", "c1", pending=True))
    assert validate(book, early) == "duplicate_event"
    book.apply(early)
    assert book.scenarios["shop"].rollouts == []
    book.apply(replace(early, event_id="a-new-request"))  # a new fact: it applies
    active = book.scenarios["shop"].active
    assert active is not None and active.rollout_id == "r1"


def test_a_second_start_while_one_is_active_is_refused_and_the_first_stands() -> None:
    book = rollout_book()
    book.apply(committed("shop", "c2", pending=True))
    second = started("shop", "r2", "c2", "h0")
    assert validate(book, second) == "rollout_active"
    book.apply(second)
    active = book.scenarios["shop"].active
    assert active is not None and active.rollout_id == "r1"


def test_a_new_head_supersedes_the_active_rollout() -> None:
    book = rollout_book()
    book.apply(committed("shop", "h1", seconds=5))
    view = book.scenarios["shop"]
    assert view.active is None and view.head == "h1"
    current = view.current
    assert current is not None
    assert (current.status, current.reason) == ("superseded", "head_moved")
    # superseded is not rolled back: the candidate may be tried against the new head
    assert validate(book, started("shop", "r2", "c1", "h1")) is None
    assert validate(book, decided("shop", "r1")) == "rollout_ended"


def test_a_redelivered_commit_neither_moves_the_head_nor_supersedes() -> None:
    book = fold([committed("shop", "h0", operation="creation"), committed("shop", "h1")])
    book.apply(committed("shop", "c1", pending=True))
    book.apply(started("shop", "r1", "c1", "h1"))
    book.apply(committed("shop", "h0", operation="creation"))  # redelivered
    view = book.scenarios["shop"]
    assert view.head == "h1" and view.active is not None


def test_a_held_release_that_is_a_held_candidate_of_nothing_has_no_marks() -> None:
    assert rollout_book().scenarios["shop"].marks("h0") == []


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (started("other", "r2", "c1", "h0"), "unknown_scenario"),
        (started("shop", "r1", "c1", "h0"), "duplicate_event"),
        (replace(started("shop", "r1", "c1", "h0"), event_id="retry"), "duplicate_rollout"),
        (started("shop", "r2", "c1", "h0", mode="blue-green"), "invalid_policy"),
        (started("shop", "r2", "c1", "h0", share=1.0), "invalid_policy"),
        (started("shop", "r2", "c1", "h0", share=0.0), "invalid_policy"),
        (started("shop", "r2", "c1", "h0", min_exchanges=0), "invalid_policy"),
        (started("shop", "r2", "c1", "h0", max_duration_s=0.0), "invalid_policy"),
        (started("shop", "r2", "c1", "h0", alpha=1.0), "invalid_policy"),
        (started("shop", "r2", "c1", "h0"), "rollout_active"),
        (decided("shop", "r1", "kept"), "invalid_outcome"),
        (decided("shop", "r1", "promoted", "hunch"), "invalid_reason"),
        (decided("other", "r1"), "unknown_scenario"),
        (decided("shop", "r1"), None),
    ],
)
def test_validate_names_why_it_refuses(
    event: RolloutStarted | RolloutDecided, reason: str | None
) -> None:
    assert validate(rollout_book(), event) == reason


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (started("shop", "r9", "c1", "h0"), "stale_head"),
        (started("shop", "r9", "zz", "h1"), "unknown_candidate"),
        (started("shop", "r9", "h1", "h1"), "not_pending"),
        (started("shop", "r9", "h0", "h1"), "not_pending"),
        (started("shop", "r9", "c1", "h1", mode="shadow", share=1.0), None),
        (started("shop", "r9", "c1", "h1"), None),
    ],
)
def test_validate_checks_the_head_and_the_candidate(event: RolloutStarted, reason: str) -> None:
    book = fold(
        [
            committed("shop", "h0", operation="creation"),
            committed("shop", "c1", pending=True),
            committed("shop", "h1"),
        ]
    )
    assert validate(book, event) == reason


@pytest.mark.parametrize(
    ("mode", "share", "group"),
    [("canary", 0.1, 9), ("canary", 0.5, 1), ("canary", 0.9, 1), ("shadow", 0.25, 4)],
)
def test_a_policy_gives_the_live_decision_its_head_group(
    mode: str, share: float, group: int
) -> None:
    policy = RolloutPolicy(mode=mode, share=share, min_exchanges=7, max_duration_s=60.0)
    rule = policy.decision_rule()
    assert (rule.head_group, rule.min_exchanges, rule.max_duration_s) == (group, 7, 60.0)


# -- replay equality over random workloads ---------------------------------------------

SCENARIOS = ("shop", "docs")
#: (kind, scenario, a, b): interpreted by ``workload`` into the chain's and rollouts' events
OPS = st.lists(
    st.tuples(
        st.sampled_from(["pending", "head", "promote", "start", "decide"]),
        st.sampled_from(SCENARIOS),
        st.integers(0, 5),
        st.integers(0, 3),
    ),
    max_size=40,
)


def workload(ops: list[tuple[str, str, int, int]]) -> list[Event]:
    """A log's worth of events: valid and refused starts (stale heads, unknown or
    unheld candidates, reused ids, a second start), decisions on active, ended and
    unknown rollouts, promotions of held releases, head moves under active rollouts."""
    events: list[Event] = [committed(s, f"{s}-0", operation="creation") for s in SCENARIOS]
    model = fold(events)
    rollouts: dict[str, list[str]] = {s: [] for s in SCENARIOS}
    for n, (kind, scenario, a, b) in enumerate(ops):
        view = model.scenarios[scenario]
        release = f"{scenario}-{n + 1}"
        held = sorted(view.held)
        ids = rollouts[scenario]
        event: Event
        if kind == "pending":
            event = committed(scenario, release, pending=True, seconds=n)
        elif kind == "head":
            event = committed(scenario, release, seconds=n)
        elif kind == "promote" and held:
            target = held[a % len(held)]
            event = committed(scenario, release, operation="promote", target=target, seconds=n)
        elif kind == "start":
            rollout = ids[-1] if a == 5 and ids else f"r{n}"
            candidates = [*held, f"{scenario}-{a}"]
            head = view.head if b else f"{scenario}-0"
            mode = "shadow" if b == 3 else "canary"  # a canary at share 1.0 is refused
            candidate = candidates[a % len(candidates)]
            share = (0.1, 0.5, 1.0, 1.0)[b]
            event = started(scenario, rollout, candidate, head or "", mode=mode, share=share)
            event = replace(event, event_id=f"start-{n}")
            ids.append(rollout)
        else:
            rollout = ids[a % len(ids)] if a < 5 and ids else "unknown"
            outcome = ("promoted", "rolled_back")[b % 2]
            event = replace(decided(scenario, rollout, outcome), event_id=f"decide-{n}")
        model.apply(event)
        events.append(event)
    return events


def per_scenario_order(events: list[Event], picks: list[bool]) -> list[Event]:
    """Another interleaving of the scenarios that keeps each scenario's own order."""
    queues = {s: [e for e in events if e.scenario == s] for s in SCENARIOS}
    out: list[Event] = []
    for pick in picks:
        source = queues[SCENARIOS[pick]] or queues[SCENARIOS[not pick]]
        if source:
            out.append(source.pop(0))
    return out + queues[SCENARIOS[0]] + queues[SCENARIOS[1]]


@settings(max_examples=150, deadline=None)
@given(ops=OPS, redeliver=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 80))))
def test_replay_with_redeliveries_reaches_the_same_state(
    ops: list[tuple[str, str, int, int]], redeliver: list[tuple[int, int]]
) -> None:
    events = workload(ops)
    once = fold(events)
    assert fold(events) == once
    redelivered = list(events)
    for original, later in redeliver:  # a copy of an event, somewhere after it
        source = original % len(redelivered)
        redelivered.insert(source + 1 + later % (len(redelivered) - source), redelivered[source])
    assert fold(redelivered) == once


@settings(max_examples=100, deadline=None)
@given(ops=OPS, picks=st.lists(st.booleans(), max_size=90))
def test_scenarios_fold_independently_of_their_interleaving(
    ops: list[tuple[str, str, int, int]], picks: list[bool]
) -> None:
    events = workload(ops)
    assert fold(per_scenario_order(events, picks)) == fold(events)


def test_the_workloads_reach_every_status() -> None:
    ops = [
        ("pending", "shop", 0, 0),
        ("start", "shop", 0, 1),  # r1 tries shop-1
        ("decide", "shop", 0, 1),  # rolled back
        ("pending", "shop", 0, 0),
        ("start", "shop", 1, 1),  # r4 tries shop-4
        ("head", "shop", 0, 0),  # superseded
        ("pending", "shop", 0, 0),
        ("start", "shop", 2, 1),  # r7 tries shop-7
        ("decide", "shop", 2, 0),  # promoted
    ]
    statuses = [r.status for r in fold(workload(ops)).scenarios["shop"].rollouts]
    assert statuses == ["rolled_back", "superseded", "promoted"]
