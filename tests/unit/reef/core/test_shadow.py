"""Shadow copies, pure (reef.core.shadow and the processors that read them): the copy's
receipt and body, a copy in no session, a copy that scores its candidate in the
controller but never trains, and a worse shadow candidate rolled back on its scores."""

from __future__ import annotations

import copy as copy_module
import json
import random
from dataclasses import replace
from typing import Any

from reef.core.events import (
    Event,
    InferenceRecorded,
    RolloutDecided,
    SampleJoined,
    TurnCompleted,
)
from reef.core.ids import scenario_tag
from reef.core.join import JoinProcessor, JoinSettings
from reef.core.rollout_control import RolloutController, live_rollout
from reef.core.shadow import (
    SHADOW_KEY,
    buffered_copy,
    shadow_receipt,
    trains,
    trajectory_shadows,
)
from reef.core.state import DictState
from reef_dev.events import inference, receipt, report
from tests.support.rollouts import at, committed, started
from tests.support.sessions import assistant, exchange, user
from tests.support.sessions import fresh as fresh_sessions

SCENARIO = "shop"
PROMPT = "You are the candidate."


def copy_of(served: InferenceRecorded, release: str, seconds: float) -> InferenceRecorded:
    """The shadow copy of ``served`` as the API records it (reef.api.shadow)."""
    return replace(
        served,
        event_id=shadow_receipt(served.event_id),
        occurred_at=at(seconds),
        release_id=release,
        shadow_of=served.event_id,
    )


# ---------------------------------------------------------------------------
# The copy


def test_a_copy_receipt_is_derived_and_keeps_the_scenario_tag() -> None:
    served = receipt(SCENARIO, 1)
    copy = shadow_receipt(served)
    assert copy == shadow_receipt(served) and copy != served
    assert len(copy) == 32 and copy.startswith(scenario_tag(SCENARIO))
    assert shadow_receipt(receipt(SCENARIO, 2)) != copy


def test_the_copy_is_buffered_and_leaves_the_clients_body_alone() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "hi"}],
    }
    before = json.dumps(body)
    copy = buffered_copy(body, "/v1/chat/completions", None)
    assert copy["stream"] is False and "stream_options" not in copy
    assert copy["messages"] == body["messages"]
    assert json.dumps(body) == before
    assert "stream" not in buffered_copy({"model": "m"}, "/v1/chat/completions", None)


def test_a_harness_candidates_system_prompt_replaces_the_clients_in_each_dialect() -> None:
    chat = {"messages": [{"role": "system", "content": "head"}, {"role": "user", "content": "q"}]}
    replaced = buffered_copy(chat, "/v1/chat/completions", PROMPT)["messages"]
    assert replaced == [{"role": "system", "content": PROMPT}, {"role": "user", "content": "q"}]
    developer = {"messages": [{"role": "developer", "content": "head"}]}
    assert buffered_copy(developer, "/v1/chat/completions", PROMPT)["messages"] == [
        {"role": "developer", "content": PROMPT}
    ]
    bare = {"messages": [{"role": "user", "content": "q"}]}
    assert buffered_copy(bare, "/v1/chat/completions", PROMPT)["messages"][0] == {
        "role": "system",
        "content": PROMPT,
    }
    messages = {"system": "head", "messages": [{"role": "user", "content": "q"}]}
    assert buffered_copy(messages, "/v1/messages", PROMPT)["system"] == PROMPT
    assert buffered_copy({"input": "q"}, "/v1/responses", PROMPT)["instructions"] == PROMPT


# ---------------------------------------------------------------------------
# Sessions: a copy is no turn


def test_a_copy_is_no_turn_of_its_session_and_changes_no_session_state() -> None:
    proc, state = fresh_sessions()
    tags = {"session": "s1"}
    first = exchange("r1", 0, [user("q")], "a", tags=tags, release="h0")
    assert proc.step(state, first) == []
    before = copy_module.deepcopy(state.data)
    copy = replace(
        exchange("r1-copy", 1, [user("q")], "b", tags=tags, release="c1"), shadow_of="r1"
    )
    assert proc.step(state, copy) == []
    assert state.data == before
    following = exchange("r2", 2, [user("q"), assistant("a"), user("ok")], "c", tags=tags)
    (turn,) = proc.step(state, following)
    assert isinstance(turn, TurnCompleted)
    assert (turn.receipt_id, turn.next_receipt_id) == ("r1", "r2")


# ---------------------------------------------------------------------------
# The join: a copy scores, marked


def joined(join: JoinProcessor, state: DictState, events: list[Event]) -> SampleJoined:
    outputs = [out for event in events for out in join.step(state, event)]
    (sample,) = outputs
    assert isinstance(sample, SampleJoined), sample
    return sample


def test_a_report_on_a_copy_joins_marked_and_never_trains() -> None:
    join, state = JoinProcessor(), DictState()
    served = inference(SCENARIO, receipt(SCENARIO, 1), at(0), release="h0")
    copy = copy_of(served, "c1", 1)
    on_copy = joined(join, state, [served, copy, report(SCENARIO, "g1", [copy.event_id], at(2))])
    assert on_copy.release_ids == ["c1"]
    (step,) = json.loads(on_copy.trajectory_json)
    assert step[SHADOW_KEY] == served.event_id
    assert trajectory_shadows(on_copy.trajectory_json) == [copy.event_id]
    assert not trains(on_copy)

    on_served = joined(join, state, [report(SCENARIO, "u1", [served.event_id], at(3))])
    assert SHADOW_KEY not in json.loads(on_served.trajectory_json)[0]
    assert trains(on_served)


def test_session_merging_never_brings_a_copy_into_a_conversation() -> None:
    join, state = JoinProcessor(JoinSettings(merge_sessions=True)), DictState()
    q = [{"role": "user", "content": "q"}]
    served = inference(SCENARIO, receipt(SCENARIO, 1), at(0), release="h0", request={"messages": q})
    copy = copy_of(served, "c1", 1)
    follow_up = [*q, {"role": "assistant", "content": f"answer {served.event_id}"}]
    follow_up.append({"role": "user", "content": "more"})
    nxt = inference(
        SCENARIO, receipt(SCENARIO, 2), at(2), release="h0", request={"messages": follow_up}
    )
    sample = joined(join, state, [served, copy, nxt, report(SCENARIO, "u", [nxt.event_id], at(3))])
    assert sample.references == [served.event_id, nxt.event_id]
    assert trains(sample)


def test_an_unreadable_trajectory_holds_no_copy() -> None:
    assert trajectory_shadows("not json") == [] and trajectory_shadows('{"a": 1}') == []


# ---------------------------------------------------------------------------
# The controller: copies count for the candidate, served exchanges for the head


def shadow_opening(share: float = 0.5) -> list[Event]:
    return [
        committed(SCENARIO, "h0", operation="creation"),
        committed(SCENARIO, "c1", pending=True, seconds=1),
        started(SCENARIO, "r1", "c1", "h0", mode="shadow", share=share, min_exchanges=8, seconds=2),
    ]


def test_copies_count_for_the_candidate_and_served_exchanges_for_the_head() -> None:
    controller, state = RolloutController(), DictState()
    for event in shadow_opening():
        controller.step(state, event)
    served = inference(SCENARIO, receipt(SCENARIO, 1), at(5), release="h0")
    failed_copy = replace(copy_of(served, "c1", 6), complete=False, status=502)
    alone = inference(SCENARIO, receipt(SCENARIO, 2), at(7), release="h0")
    for event in (served, failed_copy, alone):
        assert controller.step(state, event) == []
    head_weights = replace(copy_of(alone, "c1", 8), served_release_id="h0")  # no slot held
    assert controller.step(state, head_weights) == []
    live = live_rollout(state, SCENARIO)
    assert live is not None
    assert (live.comparison.head.exchanges, live.comparison.head.errors) == (2, 0)
    assert (live.comparison.candidate.exchanges, live.comparison.candidate.errors) == (1, 1)


def graded(n: int, copy: InferenceRecorded, score: float, seconds: float) -> SampleJoined:
    """The join's sample of a grader's report on a copy (its trajectory marked)."""
    step = {"receipt": copy.event_id, "release_id": copy.release_id, SHADOW_KEY: copy.shadow_of}
    return SampleJoined(
        event_id=f"sample-copy-{n}",
        scenario=SCENARIO,
        occurred_at=at(seconds),
        producer="reef-join",
        report_id=f"grade-{n}",
        references=[copy.event_id],
        trajectory_json=json.dumps([step]),
        score=score,
        feedback_json="null",
        metadata_json="{}",
        release_ids=[copy.release_id],
    )


def test_a_worse_shadow_candidate_is_rolled_back_on_the_scores_of_its_copies() -> None:
    controller, state = RolloutController(), DictState()
    for event in shadow_opening(share=1.0):
        controller.step(state, event)
    rng = random.Random(3)
    decisions: list[Event] = []
    for n in range(2000):
        seconds = 10.0 + n
        served = inference(SCENARIO, receipt(SCENARIO, n), at(seconds), release="h0")
        copy = copy_of(served, "c1", seconds + 0.1)
        head_sample = replace(
            graded(n, copy, float(rng.random() < 0.8), seconds + 0.2),
            event_id=f"sample-head-{n}",
            references=[served.event_id],
            trajectory_json="[]",
            release_ids=["h0"],
        )
        copy_sample = graded(n, copy, float(rng.random() < 0.2), seconds + 0.3)
        assert not trains(copy_sample)
        for event in (served, copy, head_sample, copy_sample):
            decisions += controller.step(state, event)
        if decisions:
            break
    (decision,) = decisions
    assert isinstance(decision, RolloutDecided)
    assert (decision.outcome, decision.reason) == ("rolled_back", "statistic")
    figures = json.loads(decision.figures_json)
    assert figures["candidate"]["mean_score"] < figures["head"]["mean_score"]
    assert figures["candidate"]["exchanges"] == figures["head"]["exchanges"]
