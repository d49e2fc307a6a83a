"""The proposer of a trainer: a gated candidate proposed on the release chain, the chain's
decision awaited and recorded, an accepted head pushed to engines (steps 5-6 of
:mod:`trainers.consumer`), and whether a rejected batch is trained again.

A proposal's id is derived from (group, scenario, parent, sample ids): a retry after a
crash is the same proposal and the chain decides it once. A selected candidate is proposed
to serve, or held (``pending``) with the recipe's rollout policy when it rolls out; a
gate-rejected one the recipe keeps is proposed pending. Only a candidate the chain
committed as the scenario's serving head is published (:func:`trainers.publish.publishes`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from recipes.base import Batch, Candidate, Recipe
from reef.artifacts.content import ContentStore
from reef.core.events import ReleaseProposed, utc_now
from reef.core.ids import canonical_json, derived_id
from reef.services.eventstore import EventStore
from trainers.candidates import Gated
from trainers.chainview import ChainDecision, ChainFollower
from trainers.config import TrainerConfig
from trainers.errors import TrainerError
from trainers.progress import Progress, TrainingStep
from trainers.publish import Publisher, publishes

logger = logging.getLogger("reef.trainer")

#: how often the chain is read while a decision is awaited
POLL_SECONDS = 0.2


class Proposer:
    """Proposes candidates of one trainer group and awaits the chain's decisions."""

    def __init__(
        self,
        recipe: Recipe[Any],
        store: EventStore,
        chain: ChainFollower,
        content: ContentStore,
        progress: Progress,
        config: TrainerConfig,
        *,
        publisher: Publisher | None = None,
    ) -> None:
        self.recipe = recipe
        self.store = store
        self.chain = chain
        self.content = content
        self.progress = progress
        self.config = config
        #: pushes a release committed as the head to engines (:mod:`trainers.publish`)
        self.publisher = publisher

    async def settle(self) -> None:
        """Await the decision on every proposal of this group still undecided (a crash
        after step 5), so the chain's consumed samples are complete."""
        for proposal_id in self.chain.view.undecided(self.config.group + "/"):
            logger.info("waiting for the chain's decision on earlier proposal %s", proposal_id)
            await self.decision(proposal_id)

    async def propose(
        self, batch: Batch, parent: str, candidate: Candidate, gated: Gated, step: TrainingStep
    ) -> ChainDecision:
        """Publish the candidate's folder, propose it on ``parent`` and await the chain's
        decision (recorded in ``step``); a committed head is pushed to engines."""
        content_id = await asyncio.to_thread(self.content.publish_dir, candidate.folder)
        rollout = self.recipe.config.rollout if gated.selected else None
        held = not gated.selected or rollout is not None
        proposal = self.proposal(
            batch,
            parent,
            content_id,
            candidate.metrics,
            gated.verdict(),
            pending=held,
            rollout_json=None if rollout is None else rollout.policy_json(),
        )
        await self.store.append(proposal)
        self.progress.proposals["proposed"] += 1
        logger.info(
            "proposed %s on %s (%d samples); waiting for the chain",
            proposal.proposal_id,
            parent,
            len(batch.samples),
        )
        decision = await self.decision(proposal.proposal_id)
        self._record(step, proposal.proposal_id, decision, pending=not gated.selected)
        await self._publish(candidate, decision, held=held)
        if rollout is not None and decision.committed:
            step.rollout = rollout.mode  # the chain started it with the release
        return decision

    def proposal(
        self,
        batch: Batch,
        parent: str,
        content_id: str,
        metrics: dict[str, float],
        evaluation: dict[str, Any],
        *,
        pending: bool = False,
        rollout_json: str | None = None,
    ) -> ReleaseProposed:
        """The ReleaseProposed of a candidate trained from ``batch`` on ``parent``."""
        proposal_id = derived_id(
            "proposal", self.config.group, batch.scenario, parent, *batch.sample_ids
        )
        return ReleaseProposed(
            event_id=derived_id("proposed", proposal_id),
            scenario=batch.scenario,
            occurred_at=utc_now(),
            producer=f"{self.config.group}/{self.config.producer}",
            proposal_id=proposal_id,
            content_id=content_id,
            operation="training",
            parent_release_id=parent,
            metrics_json=canonical_json(
                {"recipe": self.recipe.name, "samples": len(batch.samples), **metrics}
            ),
            evaluation_json=canonical_json(evaluation),
            sample_ids=batch.sample_ids,
            pending=pending,
            rollout_json=rollout_json,
        )

    async def decision(self, proposal_id: str) -> ChainDecision:
        """The chain's decision on the proposal, polled for up to the recipe's
        ``decision_timeout_s`` (then :class:`TrainerError`: is the chain running?)."""
        deadline = time.monotonic() + self.recipe.config.decision_timeout_s
        while True:
            await self.chain.catch_up()
            decision = self.chain.view.decisions.get(proposal_id)
            if decision is not None:
                return decision
            if time.monotonic() > deadline:
                raise TrainerError(
                    f"no decision on proposal {proposal_id} within "
                    f"{self.recipe.config.decision_timeout_s:.0f}s: is the release chain running?"
                )
            await asyncio.sleep(POLL_SECONDS)

    def retries(self, decision: ChainDecision, rebases: int) -> bool:
        """Whether a batch the chain rejected is trained again: on a new head
        (``stale_parent`` with ``on_stale: rebase``) or without samples consumed meanwhile
        (``samples_already_consumed``), at most ``max_rebases`` times."""
        if rebases >= self.recipe.config.max_rebases:
            return False
        stale = decision.reason == "stale_parent" and self.recipe.config.on_stale == "rebase"
        if not stale and decision.reason != "samples_already_consumed":
            return False
        if stale:
            logger.info("the head moved to %s: re-basing the batch", decision.head_release_id)
        return True

    def _record(
        self, step: TrainingStep, proposal_id: str, decision: ChainDecision, *, pending: bool
    ) -> None:
        step.proposal_id = proposal_id
        if decision.committed and pending:
            # the gate's rejection stands (counted there); the candidate is only recorded
            self.progress.proposals["pending"] += 1
            step.pending_release_id = decision.release_id
            logger.info("rejected candidate kept as pending release %s", decision.release_id)
        elif decision.committed:
            self.progress.candidates["accepted"] += 1
            self.progress.proposals["committed"] += 1
            step.outcome, step.release_id = "committed", decision.release_id
            logger.info(
                "release %s committed for %s (score %.4f, head was %.4f)",
                decision.release_id,
                step.scenario,
                _or_nan(step.candidate_score),
                _or_nan(step.baseline_score),
            )
        else:
            self.progress.proposals[f"rejected:{decision.reason}"] += 1
            step.outcome, step.reason = "chain_rejected", decision.reason
            logger.warning("the chain rejected proposal %s: %s", proposal_id, decision.reason)

    async def _publish(self, candidate: Candidate, decision: ChainDecision, *, held: bool) -> None:
        """Push the candidate to engines when the chain made it the serving head (from its
        folder, which is still there); the outcome is counted."""
        if self.publisher is None or decision.release_id is None:
            return
        if not publishes(decision, pending=held):
            return
        outcome = await asyncio.to_thread(
            self.publisher.publish, candidate.folder, decision.release_id
        )
        self.progress.publishes[outcome] += 1


def _or_nan(score: float | None) -> float:
    return float("nan") if score is None else score
