"""The trainer's proposer (trainers/proposer.py) on its own: gated candidates proposed on
the real release chain over the embedded log, with no trainer loop and no Kafka. It
proposes, records the chain's decision, retries a lost race by re-basing up to its limit
then gives up, and publishes only a candidate the chain made the serving head."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from recipes.base import Batch, Candidate, Parent
from recipes.registry import build_recipe
from recipes.samples import Sample
from reef.core import topics
from reef.core.chain import ReleaseChainProcessor
from reef.core.events import RolloutStarted
from reef.hosts.embedded import EmbeddedRuntime
from tests.support.trainer_harness import FAKE, Harness
from trainers.candidates import CandidatePipeline, Gated
from trainers.chainview import ChainDecision, ChainFollower
from trainers.config import TrainerConfig
from trainers.errors import TrainerError
from trainers.progress import Progress, TrainingStep
from trainers.proposer import Proposer
from trainers.publish import Outcome, PublishConfig, Publisher


class RecordingPublisher(Publisher):
    """The publishing step, recording what it was asked to push (its folder still there)."""

    def __init__(self) -> None:
        super().__init__(PublishConfig("tensor", ("http://127.0.0.1:9",)))
        self.calls: list[tuple[str, bool]] = []

    def publish(self, folder: Path, release_id: str) -> Outcome:
        self.calls.append((release_id, folder.is_dir()))
        return "ok"


def proposer_for(
    harness: Harness, config: dict[str, Any], publisher: Publisher | None = None
) -> Proposer:
    recipe = build_recipe(FAKE, config)
    trainer = TrainerConfig(FAKE, "test", harness.tmp / "trainer")
    return Proposer(
        recipe,
        harness.store,
        ChainFollower(harness.store),
        harness.content,
        Progress(FAKE, trainer.group),
        trainer,
        publisher=publisher,
    )


def batch_of(scenario: str, served_by: str, *sample_ids: str) -> Batch:
    samples = (
        Sample(sample_id, scenario, f"report-{sample_id}", 1.0, {}, {}, (), (served_by,))
        for sample_id in sample_ids
    )
    return Batch(scenario, tuple((sample,) for sample in samples))


async def gated_candidate(
    proposer: Proposer, batch: Batch, parent: str, out: Path
) -> tuple[Candidate, Gated, TrainingStep]:
    """The recipe's candidate from ``batch`` on ``parent`` (the built-in base) and the
    gate's decision on it, as the candidate pipeline makes them."""
    pipeline = CandidatePipeline(proposer.recipe)
    base = Parent(parent, "unused", None)
    candidate = await pipeline.train(batch, base, out)
    gated = await pipeline.gate(out.name, candidate.folder, base)
    step = TrainingStep(batch.scenario, parent, len(batch.samples), 0.0)
    return candidate, gated, step


async def propose(
    proposer: Proposer, batch: Batch, parent: str, out: Path
) -> tuple[ChainDecision, TrainingStep]:
    candidate, gated, step = await gated_candidate(proposer, batch, parent, out)
    return await proposer.propose(batch, parent, candidate, gated, step), step


async def test_a_selected_candidate_is_proposed_committed_and_published(
    harness: Harness, tmp_path: Path
) -> None:
    r0 = await harness.create("s")
    publisher = RecordingPublisher()
    proposer = proposer_for(harness, {}, publisher)
    decision, step = await propose(proposer, batch_of("s", r0, "a", "b"), r0, tmp_path / "c1")
    assert decision.committed and decision.release_id is not None
    (release,) = await harness.committed()
    assert release.release_id == decision.release_id and release.parent_release_id == r0
    assert sorted(release.sample_ids) == ["a", "b"] and not release.pending
    metrics = json.loads(release.metrics_json)
    assert metrics["recipe"] == "fake" and metrics["samples"] == 2
    assert json.loads(release.evaluation_json)["decision"]["selected"] is True
    assert step.outcome == "committed" and step.release_id == decision.release_id
    assert step.proposal_id == release.proposal_id
    assert publisher.calls == [(decision.release_id, True)]
    assert proposer.progress.publishes == {"ok": 1}
    assert proposer.progress.proposals == {"proposed": 1, "committed": 1}
    assert proposer.progress.candidates["accepted"] == 1


async def test_a_lost_race_is_rebased_up_to_the_limit_then_given_up(
    harness: Harness, tmp_path: Path
) -> None:
    r0 = await harness.create("s")
    r1 = await harness.move_head("s", r0, 0.5)  # another writer wins the race
    publisher = RecordingPublisher()
    proposer = proposer_for(harness, {"max_rebases": 2}, publisher)
    batch = batch_of("s", r0, "a")
    decision, step = await propose(proposer, batch, r0, tmp_path / "c1")
    assert not decision.committed
    assert (decision.reason, decision.head_release_id) == ("stale_parent", r1)
    assert (step.outcome, step.reason, step.release_id) == ("chain_rejected", "stale_parent", None)
    assert proposer.progress.proposals["rejected:stale_parent"] == 1
    assert publisher.calls == [] and await harness.committed() == []
    assert [proposer.retries(decision, rebases) for rebases in range(4)] == [
        True,
        True,
        False,
        False,
    ]
    rebased, step = await propose(proposer, batch, r1, tmp_path / "c2")  # on the new head
    assert rebased.committed and step.outcome == "committed"
    assert publisher.calls == [(rebased.release_id, True)]


async def test_a_batch_is_given_up_when_the_recipe_drops_stale_proposals_or_the_reason_is_final(
    harness: Harness,
) -> None:
    dropping = proposer_for(harness, {"on_stale": "drop"})
    rebasing = proposer_for(harness, {})
    stale = ChainDecision(False, reason="stale_parent", head_release_id="r1")
    consumed = ChainDecision(False, reason="samples_already_consumed", head_release_id="r0")
    invalid = ChainDecision(False, reason="invalid_rollout", head_release_id="r0")
    assert not dropping.retries(stale, 0) and dropping.retries(consumed, 0)
    assert rebasing.retries(stale, 0) and not rebasing.retries(invalid, 0)


async def test_a_kept_or_rolled_out_candidate_is_held_by_the_chain_and_never_published(
    harness: Harness, tmp_path: Path
) -> None:
    r0 = await harness.create("s")
    publisher = RecordingPublisher()
    worse = {"step": -0.5, "gate": {"policy": "win_margin", "margin": 0.0}}
    keeping = proposer_for(harness, worse, publisher)
    candidate, gated, step = await gated_candidate(
        keeping, batch_of("s", r0, "a"), r0, tmp_path / "c1"
    )
    assert not gated.selected  # the gate rejected it; a recipe that keeps it proposes it
    kept = await keeping.propose(batch_of("s", r0, "a"), r0, candidate, gated, step)
    assert kept.committed and step.pending_release_id == kept.release_id
    assert step.outcome is None and keeping.progress.proposals["pending"] == 1
    assert keeping.progress.candidates["accepted"] == 0

    rolling = proposer_for(harness, {"rollout": {"mode": "canary"}}, publisher)
    rolled, step = await propose(rolling, batch_of("s", r0, "b"), r0, tmp_path / "c2")
    assert rolled.committed and step.rollout == "canary" and step.outcome == "committed"
    held = {c.release_id for c in await harness.committed() if c.pending}
    assert held == {kept.release_id, rolled.release_id}
    (started,) = [e for e in await harness.events(topics.RELEASES) if isinstance(e, RolloutStarted)]
    assert started.candidate_release_id == rolled.release_id
    assert publisher.calls == []


async def test_a_proposal_left_undecided_is_awaited_and_a_silent_chain_is_an_error(
    harness: Harness,
) -> None:
    r0 = await harness.create("s")
    await harness.chain.close()  # the chain stops: nothing is decided
    proposer = proposer_for(harness, {"decision_timeout_s": 0.5})
    content_id = harness.content.publish_files({"score.txt": "0.5"})
    proposal = proposer.proposal(batch_of("s", r0, "a"), r0, content_id, {}, {})
    await harness.store.append(proposal)  # a crash came before its decision
    await proposer.chain.catch_up()
    with pytest.raises(TrainerError, match=f"no decision on proposal {proposal.proposal_id}"):
        await proposer.settle()
    harness.chain = EmbeddedRuntime(harness.log, ReleaseChainProcessor(), idle_wait=0.05)
    await harness.chain.start()
    await proposer.settle()
    decision = proposer.chain.view.decisions[proposal.proposal_id]
    assert decision.committed and proposer.chain.view.undecided(f"trainer:{FAKE}/") == []
