"""A held training proposal with a rollout policy: the chain commits the candidate and
starts its rollout in one step, which the rollouts fold applies (reef/core/chain.py);
a recipe's ``rollout`` is the policy its trainer proposes with (recipes/rollout.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from recipes.rollout import RolloutConfig
from reef.core.chain import ReleaseChainProcessor
from reef.core.events import Event, ReleaseCommitted, ReleaseRejected, RolloutStarted
from reef.core.rollouts import RolloutBook
from reef.core.state import DictState
from reef_dev.events import created, proposal

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
POLICY = RolloutConfig(share=0.2, min_exchanges=20, max_duration_s=600.0).policy_json()


def chain_with_scenario() -> tuple[ReleaseChainProcessor, DictState, str, RolloutBook]:
    chain, state, book = ReleaseChainProcessor(), DictState(), RolloutBook()
    (creation,) = chain.step(state, created("s", T0))
    book.apply(creation)
    assert isinstance(creation, ReleaseCommitted)
    return chain, state, creation.release_id, book


def propose(
    chain: ReleaseChainProcessor, state: DictState, head: str, **extra: object
) -> list[Event]:
    pid, content = str(extra.pop("pid", "p1")), str(extra.pop("content", "c1"))
    event = proposal("s", pid, head, content, T0, pending=True)
    return chain.step(state, replace(event, **extra))  # type: ignore[arg-type]


def test_a_held_candidate_with_a_policy_is_committed_and_its_rollout_started() -> None:
    chain, state, head, book = chain_with_scenario()
    out = propose(chain, state, head, rollout_json=POLICY)
    committed, started = out
    assert isinstance(committed, ReleaseCommitted) and committed.pending
    assert isinstance(started, RolloutStarted)
    assert (started.candidate_release_id, started.head_release_id) == (committed.release_id, head)
    assert (started.mode, started.share, started.min_exchanges) == ("canary", 0.2, 20)
    for event in out:
        book.apply(event)
    live = book.scenarios["s"].active
    assert live is not None and live.rollout_id == started.rollout_id
    assert book.scenarios["s"].head == head  # the head keeps serving the rest


def test_a_redone_step_starts_the_same_rollout_and_a_redelivery_nothing() -> None:
    chain, state, head, _ = chain_with_scenario()
    first = propose(chain, state, head, rollout_json=POLICY)
    assert propose(chain, state, head, rollout_json=POLICY) == []  # redelivered proposal
    redone, redone_state, _, _ = chain_with_scenario()  # the step redone after a crash
    assert propose(redone, redone_state, head, rollout_json=POLICY) == first


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"rollout_json": "not json"}, "unparseable"),
        ({"rollout_json": json.dumps({"mode": "canary", "share": 1.0})}, "missing fields"),
        (
            {"rollout_json": json.dumps({**json.loads(POLICY), "share": 1.0})},
            "a canary of every session",
        ),
        ({"rollout_json": json.dumps({**json.loads(POLICY), "bogus": 1})}, "unknown field"),
        ({"rollout_json": "[1]"}, "not an object"),
        ({"rollout_json": POLICY, "pending": False}, "served at once"),
    ],
)
def test_a_proposal_with_a_policy_the_chain_cannot_start_is_rejected(
    extra: dict[str, object], why: str
) -> None:
    chain, state, head, _ = chain_with_scenario()
    (rejected,) = propose(chain, state, head, **extra)
    assert isinstance(rejected, ReleaseRejected), why
    assert rejected.reason == "invalid_rollout", why
    assert state.get("head/s") == head


def test_a_start_while_another_rollout_is_live_is_refused_by_the_fold_and_the_candidate_held() -> (
    None
):
    chain, state, head, book = chain_with_scenario()
    for event in propose(chain, state, head, rollout_json=POLICY):
        book.apply(event)
    committed, second = propose(chain, state, head, pid="p2", content="c2", rollout_json=POLICY)
    book.apply(committed)
    book.apply(second)
    view = book.scenarios["s"]
    assert isinstance(committed, ReleaseCommitted)
    assert view.active is not None and view.active.candidate_release_id != committed.release_id
    assert committed.release_id in view.held


def test_a_recipe_rollout_is_checked_like_the_fold_checks_a_start() -> None:
    assert json.loads(RolloutConfig().policy_json())["mode"] == "canary"
    with pytest.raises(ValueError, match="share"):
        RolloutConfig(share=1.0)
    with pytest.raises(ValueError, match="min_exchanges"):
        RolloutConfig(min_exchanges=0)
    with pytest.raises(ValueError, match="mode"):
        RolloutConfig(mode="blue-green")
    assert RolloutConfig(mode="shadow", share=1.0).policy().mode == "shadow"
