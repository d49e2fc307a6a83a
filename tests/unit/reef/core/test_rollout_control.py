"""The rollout controller, pure (reef.core.rollout_control): one test per rule of its
docstring, exactly one decision per rollout whatever is redelivered, a promotion that
becomes the chain's promote only when the log says so, and replay equality (the state
written as the hosts write it, JSON, gives the same outputs as the state kept in memory)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import replace

from reef.core.chain import ReleaseChainProcessor
from reef.core.events import (
    Event,
    InferenceRecorded,
    ReleaseCommitted,
    ReleaseProposed,
    RolloutDecided,
    SampleJoined,
)
from reef.core.rollout_control import (
    PRODUCER,
    RolloutController,
    decision_id,
    live_rollout,
    promotion_id,
    score_outcome,
)
from reef.core.state import DictState, WriteBuffer
from reef.hosts.state_codec import dump_value, load_value
from reef_dev.events import inference, receipt
from tests.support.rollouts import at, committed, decided, started

SCENARIO = "shop"


def opening(
    min_exchanges: int = 20, max_duration_s: float = 3600.0, latency_slo_ms: float | None = None
) -> list[Event]:
    """Head ``h0``, held ``c1``, and a 20% canary of ``c1`` started at second 2."""
    return [
        committed(SCENARIO, "h0", operation="creation"),
        committed(SCENARIO, "c1", pending=True, seconds=1),
        started(
            SCENARIO,
            "r1",
            "c1",
            "h0",
            share=0.2,
            min_exchanges=min_exchanges,
            max_duration_s=max_duration_s,
            seconds=2,
            latency_slo_ms=latency_slo_ms,
        ),
    ]


def sample(n: int, releases: list[str], score: float, seconds: float) -> SampleJoined:
    return SampleJoined(
        event_id=f"sample-{n}",
        scenario=SCENARIO,
        occurred_at=at(seconds),
        producer="reef-join",
        report_id=f"report-{n}",
        references=[receipt(SCENARIO, n)],
        trajectory_json="[]",
        score=score,
        feedback_json="null",
        metadata_json="{}",
        release_ids=releases,
    )


def traffic(
    head_p: float, candidate_p: float, count: int, seed: int = 7, start: float = 10.0
) -> Iterator[Event]:
    """A 20% canary: each exchange, then a report scoring it 1 with its arm's p, else 0."""
    rng = random.Random(seed)
    for n in range(count):
        arm, p = ("c1", candidate_p) if rng.random() < 0.2 else ("h0", head_p)
        seconds = start + n
        yield inference(SCENARIO, receipt(SCENARIO, n), at(seconds), release=arm)
        yield sample(n, [arm], 1.0 if rng.random() < p else 0.0, seconds + 0.5)


def run(events: Iterable[Event], state: DictState | None = None) -> tuple[DictState, list[Event]]:
    state = state if state is not None else DictState()
    controller = RolloutController()
    outputs = [out for event in events for out in controller.step(state, event)]
    return state, outputs


def first_decision(head_p: float, candidate_p: float) -> tuple[DictState, RolloutDecided]:
    state, _ = run(opening())
    controller = RolloutController()
    for event in traffic(head_p, candidate_p, 5000):
        outputs = controller.step(state, event)
        if outputs:
            (decision,) = outputs
            assert isinstance(decision, RolloutDecided)
            return state, decision
    raise AssertionError("no decision in 5000 exchanges")


def test_a_start_opens_the_live_comparison_and_exchanges_count_per_arm() -> None:
    state, outputs = run(opening())
    assert outputs == []
    live = live_rollout(state, SCENARIO)
    assert live is not None and (live.head, live.candidate) == ("h0", "c1")

    exchanges = [
        inference(SCENARIO, receipt(SCENARIO, 1), at(5), release="c1"),
        inference(SCENARIO, receipt(SCENARIO, 2), at(6), release="h0"),
        inference(SCENARIO, receipt(SCENARIO, 3), at(7), release="h0", complete=False),
        inference(SCENARIO, receipt(SCENARIO, 4), at(8), release="pinned-elsewhere"),
    ]
    run(exchanges, state)
    live = live_rollout(state, SCENARIO)
    assert live is not None
    assert live.comparison.candidate.exchanges == 1 and live.comparison.candidate.errors == 0
    assert live.comparison.head.exchanges == 2 and live.comparison.head.errors == 1


def test_the_release_that_served_counts_not_the_one_routed() -> None:
    state, _ = run(opening())
    routed_to_candidate: InferenceRecorded = replace(
        inference(SCENARIO, receipt(SCENARIO, 1), at(5), release="c1"), served_release_id="h0"
    )
    run([routed_to_candidate], state)
    live = live_rollout(state, SCENARIO)
    assert live is not None
    assert (live.comparison.head.exchanges, live.comparison.candidate.exchanges) == (1, 0)


def test_scores_are_read_on_zero_to_one_and_mixed_samples_are_not_counted() -> None:
    assert [score_outcome(s) for s in (-1.0, 0.0, 0.25, 1.0, 7.0)] == [0.0, 0.0, 0.25, 1.0, 1.0]
    state, _ = run(opening())
    run(
        [
            sample(1, ["c1"], -1.0, 5),
            sample(2, ["h0"], 3.0, 6),
            sample(3, ["h0", "c1"], 1.0, 7),
            sample(4, ["elsewhere"], 1.0, 8),
        ],
        state,
    )
    live = live_rollout(state, SCENARIO)
    assert live is not None
    assert live.comparison.candidate.figures()["mean_score"] == 0.0
    assert live.comparison.head.figures()["mean_score"] == 1.0
    assert live.comparison.head.scores + live.comparison.candidate.scores == 2


def test_a_better_candidate_is_promoted_once_and_then_proposed_to_the_chain() -> None:
    state, decision = first_decision(head_p=0.3, candidate_p=0.9)
    assert decision.outcome == "promoted" and decision.reason == "statistic"
    assert decision.event_id == decision_id(SCENARIO, "r1") and decision.producer == PRODUCER
    figures = json.loads(decision.figures_json)
    assert figures["verdict"] == "promote" and figures["p_better"] <= 0.05
    assert figures["candidate"]["mean_score"] > figures["head"]["mean_score"]

    # more outcomes before the decision comes back through the log: nothing more
    _, more = run(traffic(0.3, 0.9, 200, seed=8, start=9000), state)
    assert more == []

    (proposal,) = RolloutController().step(state, decision)
    assert isinstance(proposal, ReleaseProposed)
    assert proposal.event_id == proposal.proposal_id == promotion_id(SCENARIO, "r1")
    assert (proposal.operation, proposal.target_release_id) == ("promote", "c1")
    assert proposal.parent_release_id == "h0" and proposal.content_id == "content-c1"
    assert json.loads(proposal.metrics_json)["rollout_reason"] == "statistic"
    assert live_rollout(state, SCENARIO) is None
    # the same decision again (a producer's retry) proposes nothing
    assert RolloutController().step(state, decision) == []


def test_the_chain_commits_the_promotion_as_a_promote_of_the_candidate() -> None:
    chain, chain_state = ReleaseChainProcessor(), DictState()
    # the chain's own state for head h0 and held c1 (what its commits of them wrote)
    chain_state.set(f"head/{SCENARIO}", "h0")
    chain_state.set(f"release/{SCENARIO}/h0", {"content_id": "content-h0", "pending": False})
    chain_state.set(f"release/{SCENARIO}/c1", {"content_id": "content-c1", "pending": True})
    state, decision = first_decision(head_p=0.2, candidate_p=0.9)
    (proposal,) = RolloutController().step(state, decision)
    assert isinstance(proposal, ReleaseProposed)
    (commit,) = chain.step(chain_state, proposal)
    assert isinstance(commit, ReleaseCommitted), commit
    assert commit.operation == "promote" and commit.target_release_id == "c1"
    assert chain_state.get(f"head/{SCENARIO}") == commit.release_id
    assert chain.step(chain_state, proposal) == []  # a second copy: decided already
    # the new head reaches the controller: the rollout stays promoted, nothing is emitted
    assert RolloutController().step(state, commit) == []


def test_a_worse_candidate_is_rolled_back_and_never_proposed() -> None:
    state, decision = first_decision(head_p=0.8, candidate_p=0.2)
    assert decision.outcome == "rolled_back" and decision.reason == "statistic"
    assert RolloutController().step(state, decision) == []
    assert live_rollout(state, SCENARIO) is None


def test_a_candidate_that_fails_more_often_is_rolled_back_for_its_errors() -> None:
    state, _ = run(opening(min_exchanges=10))
    rng = random.Random(3)
    outputs: list[Event] = []
    for n in range(3000):
        arm = "c1" if rng.random() < 0.2 else "h0"
        failed = arm == "c1" and rng.random() < 0.5
        event = inference(
            SCENARIO, receipt(SCENARIO, n), at(10 + n), release=arm, complete=not failed
        )
        outputs += RolloutController().step(state, event)
        if outputs:
            break
    (decision,) = outputs
    assert isinstance(decision, RolloutDecided)
    assert (decision.outcome, decision.reason) == ("rolled_back", "errors")


def test_a_candidate_slower_than_the_latency_objective_is_rolled_back_for_latency() -> None:
    state, _ = run(opening(min_exchanges=10, latency_slo_ms=500.0))
    rng = random.Random(3)
    outputs: list[Event] = []
    for n in range(3000):
        arm = "c1" if rng.random() < 0.2 else "h0"
        slow = arm == "c1" and rng.random() < 0.5
        event = inference(
            SCENARIO,
            receipt(SCENARIO, n),
            at(10 + n),
            release=arm,
            latency_ms=800.0 if slow else 120.0,
        )
        outputs += RolloutController().step(state, event)
        if outputs:
            break
    (decision,) = outputs
    assert isinstance(decision, RolloutDecided)
    assert (decision.outcome, decision.reason) == ("rolled_back", "latency")
    figures = json.loads(decision.figures_json)
    assert figures["candidate"]["slow"] > 0 == figures["head"]["slow"]
    assert figures["p_slower"] <= 0.05


def test_the_deadline_in_event_time_rolls_back_an_unproven_candidate() -> None:
    state, _ = run(opening(min_exchanges=1000, max_duration_s=60.0))
    _, early = run([inference(SCENARIO, receipt(SCENARIO, 1), at(61), release="h0")], state)
    assert early == []
    _, late = run([inference(SCENARIO, receipt(SCENARIO, 2), at(62), release="pinned")], state)
    (decision,) = late
    assert isinstance(decision, RolloutDecided)
    assert (decision.outcome, decision.reason) == ("rolled_back", "max_duration")


def test_a_manual_decision_first_in_the_log_wins_over_the_controllers() -> None:
    state, controllers = first_decision(head_p=0.8, candidate_p=0.2)
    manual = decided(SCENARIO, "r1", "promoted", "manual", seconds=9000)
    (proposal,) = RolloutController().step(state, manual)
    assert isinstance(proposal, ReleaseProposed) and proposal.target_release_id == "c1"
    # the controller's own rollback comes back later: the fold ignores it
    assert RolloutController().step(state, controllers) == []
    assert json.loads(proposal.metrics_json)["rollout_reason"] == "manual"


def test_a_new_head_supersedes_the_live_rollout_without_a_decision() -> None:
    state, _ = run(opening())
    run(traffic(0.5, 0.5, 20), state)
    assert RolloutController().step(state, committed(SCENARIO, "h1", seconds=50)) == []
    assert live_rollout(state, SCENARIO) is None
    _, outputs = run(traffic(0.1, 0.9, 2000, start=60), state)
    assert outputs == []


def test_a_refused_start_opens_nothing() -> None:
    state, _ = run(opening())
    second = started(SCENARIO, "r2", "c1", "h0", seconds=3)
    run([second], state)
    live = live_rollout(state, SCENARIO)
    assert live is not None and live.rollout_id == "r1"
    stale = [committed(SCENARIO, "c2", pending=True, seconds=4)]
    state2, _ = run([*opening()[:2], *stale, started(SCENARIO, "r9", "c2", "old-head", seconds=5)])
    assert live_rollout(state2, SCENARIO) is None


def test_each_scenario_has_its_own_rollout() -> None:
    state, _ = run(opening())
    other = [
        committed("other", "h0", operation="creation"),
        inference("other", receipt("other", 1), at(5), release="h0"),
    ]
    assert run(other, state)[1] == []
    assert live_rollout(state, "other") is None
    live = live_rollout(state, SCENARIO)
    assert live is not None and live.comparison.head.exchanges == 0


class JsonState(DictState):
    """State as the hosts keep it: every value written is JSON and read back decoded."""

    def set(self, key: str, value: object) -> None:
        super().set(key, load_value(dump_value(value)))


def test_replay_and_json_state_reach_the_same_decision_at_the_same_event() -> None:
    events = [*opening(), *traffic(0.3, 0.7, 3000, seed=11)]
    memory_state, memory_outputs = run(events)
    json_state, json_outputs = run(events, JsonState())
    again_state, again_outputs = run(events)
    assert memory_outputs == json_outputs == again_outputs
    assert len([o for o in memory_outputs if isinstance(o, RolloutDecided)]) == 1
    assert memory_state.data == again_state.data
    assert load_value(dump_value(memory_state.data)) == json_state.data


def test_a_step_redone_after_a_crash_makes_the_same_decision_with_the_same_id() -> None:
    state, _ = run(opening())
    controller = RolloutController()
    for event in traffic(0.3, 0.9, 5000):
        # the host's write buffer over the committed state; a crash before the commit
        # drops it, and the redelivered input runs again on the same committed state
        lost = WriteBuffer(state)
        first = controller.step(lost, event)
        redone = WriteBuffer(state)
        second = controller.step(redone, event)
        assert first == second
        for key, value in redone.changes():
            state.set(key, value) if value is not None else state.delete(key)
        if first:
            break
    (decision,) = first
    assert isinstance(decision, RolloutDecided) and decision.outcome == "promoted"
    # committed once: the same input delivered again after the commit decides nothing
    assert controller.step(state, event) == []
