"""The trainer: a consumer of ``reef.samples`` (group ``trainer:<recipe>``) driving a recipe.

It coordinates four collaborators: the sample intake (:mod:`trainers.intake`: steps 2 and
7), the batcher (:mod:`trainers.batcher`), the candidate pipeline
(:mod:`trainers.candidates`: steps 3-4) and the proposer (:mod:`trainers.proposer`: steps
5-6), over one view of the release chain (:mod:`trainers.chainview`). Each attempt at a
candidate is a :class:`trainers.progress.TrainingStep`.

Order of work, written down once (what a crash between two steps means is in brackets):

1. Catch the chain view up (``reef.scenarios``, ``reef.releases``,
   ``reef.release-proposals``) and wait for the decision on any proposal this group
   made that is still undecided (a crash after step 5 and before step 6), so the set of
   consumed sample ids is complete before anything is read. A recipe that folds the
   chain (:class:`recipes.releases.ReleaseObserver`, e.g. ``gepa``'s archive) is fed
   every committed release, in log order, on each catch-up: its state is rebuilt from
   the log after a restart.
2. Read ``reef.samples`` from the group's committed offsets. A sample of a scenario
   bound to another recipe, or already consumed by a committed release, is skipped; one
   the recipe does not admit (score window, staleness, missing group key, no training
   signal) is skipped with its reason counted; the rest wait in the batcher. A sample
   served by a release the chain has not committed yet (a scenario's creation release is
   committed by the chain processor after the API serves it, so the join can get there
   first) is held, its offset pending, and admitted on a later catch-up; after
   ``release_wait_s`` it is skipped as ``unknown_release``.
3. When a scenario has a full batch (or ``max_wait_s`` passed without a new sample):
   drop waiting samples that became stale or consumed, take the batch, materialise the
   head release and let the recipe produce a candidate from it (worker thread).
4. Evaluate the candidate and the head on the same evaluation, at most once per
   candidate / release (cached); an evaluation error rejects (fails closed). The gate
   decides. A rejected candidate proposes nothing: the head keeps serving, the batch is
   done (counted, logged); unless the recipe keeps rejected candidates
   (``ReleaseObserver.keep_rejected``): then steps 5-6 propose it as a *pending* release
   (recorded and consuming the batch, never served). [A crash here retrains the batch:
   no release holds it.] With the recipe's ``rollout`` set, a selected candidate is
   proposed pending with the policy: the chain commits it held and starts its rollout,
   and no further batch of the scenario trains (full batches wait, re-checked every
   second) until the rollout is decided and a promotion committed, so each candidate is
   tried against the head it was trained from.
5. Publish the candidate's folder (content-addressed), then append ReleaseProposed
   naming the parent it trained from and the sample ids it consumed. Its proposal id is
   derived from (group, scenario, parent, sample ids), so a retry after a crash is the
   same proposal and the chain decides it once.
6. Wait for the chain's ReleaseCommitted / ReleaseRejected with that proposal id.
   ``stale_parent``: retrain on the new head (``on_stale: rebase``, at most
   ``max_rebases`` times) or drop; ``samples_already_consumed``: retrain without the
   consumed samples. [A crash while waiting: step 1 waits for the decision instead.]
   Committed as the new head, with ``trainer_publish`` set: push the candidate's weights
   to the engines (:mod:`trainers.publish`, worker thread) before its folder is removed;
   a failure is counted in ``publishes``. [A crash before it: the sidecars load from disk.]
7. Only then commit the group's offsets: per partition, the offset of the oldest sample
   still pending (waiting or in a batch being decided), else the read position. [A
   crash before this rereads samples; consumed ones are skipped in step 2.]

A sample therefore ends in at most one release: the chain refuses a second consumption,
and the trainer never proposes a sample it knows to be consumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recipes.base import Batch, Candidate, Evaluation, Parent, Recipe
from recipes.errors import RecipeError
from recipes.releases import ReleaseObserver
from recipes.samples import ClaimResolver
from reef.artifacts.content import ContentStore
from reef.core.events import ReleaseCommitted
from reef.core.ids import derived_id
from reef.observability.tracing import Tracing, TrainingSpan
from reef.services.eventstore import EventStore
from trainers.batcher import Batcher
from trainers.candidates import CandidatePipeline, EvaluationFailedError, Gated
from trainers.chainview import ChainDecision, ChainFollower, release_fact
from trainers.config import TrainerConfig
from trainers.errors import TrainerError
from trainers.heap import release_freed_memory
from trainers.intake import SampleIntake
from trainers.progress import Outcome, Progress, TrainingStep
from trainers.proposer import Proposer
from trainers.publish import Publisher
from trainers.releases import ReleaseFolders

__all__ = ["Trainer", "TrainerConfig", "TrainerError"]

logger = logging.getLogger("reef.trainer")


class Trainer:
    """One member of the ``trainer:<recipe>`` group; :meth:`run` until cancelled."""

    def __init__(
        self,
        recipe: Recipe[Any],
        store: EventStore,
        content: ContentStore,
        config: TrainerConfig,
        *,
        resolve: ClaimResolver | None = None,
        tracing: Tracing | None = None,
        publisher: Publisher | None = None,
    ) -> None:
        self.recipe = recipe
        self.config = config
        #: spans of training steps, when the process traces (reef.observability.tracing)
        self.tracing = tracing
        self.progress = Progress(config.recipe_name, config.group)
        self.follower = ChainFollower(store, on_release=_observer(recipe))
        self.batcher = Batcher(recipe.config.batching)
        self.releases = ReleaseFolders(content, config.work_dir / "releases")
        #: steps 2 and 7: samples into the batcher, offsets behind the pending ones
        self.intake = SampleIntake(
            recipe, store, self.follower, self.batcher, self.progress, config, resolve=resolve
        )
        #: steps 3-4: train, evaluate (each once), gate
        self.candidates = CandidatePipeline(recipe)
        #: steps 5-6: propose, await the chain, publish
        self.proposer = Proposer(
            recipe, store, self.follower, content, self.progress, config, publisher=publisher
        )
        if isinstance(recipe, ReleaseObserver):
            recipe.bind_contents(self.releases.open)

    # -- the loop ----------------------------------------------------------------------

    async def run(self) -> None:
        self.progress.running = True
        try:
            await self._start()
            reader = asyncio.create_task(self.intake.follow(), name="trainer-reader")
            try:
                await self._loop(reader)
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
        finally:
            self.progress.running = False

    async def _start(self) -> None:
        """Step 1, then step 2 from the committed offsets."""
        await self.follower.catch_up()
        await self.proposer.settle()
        offsets = await self.intake.start()
        logger.info(
            "trainer %s (%s) starts at %s",
            self.config.group,
            self.recipe.name,
            {p: o for p, o in offsets.items() if o},
        )

    async def _loop(self, reader: asyncio.Task[None]) -> None:
        """Ingest each record read (step 2); once none is queued, or after ``max_wait_s``
        without one, train the ready batches (steps 3-6) and commit (step 7)."""
        wait = self.recipe.config.batching.max_wait_s
        while True:
            if reader.done():
                reader.result()  # re-raise the reader's failure
                raise TrainerError("the sample reader stopped")
            record = await self.intake.next(wait or 1.0)
            if record is None:  # full batches held back by a live rollout are retried
                await self._work(partial=wait is not None)
                continue
            await self.intake.ingest(record)
            if self.intake.drained():
                await self._work(partial=False)

    async def _work(self, *, partial: bool) -> None:
        await self.intake.admit_unresolved()
        await self._train_ready(partial=partial)
        await self.intake.commit()

    # -- steps 3-6: batches -------------------------------------------------------------

    async def _train_ready(self, *, partial: bool) -> None:
        for scenario in self.batcher.scenarios():
            if not partial and not self.batcher.ready(scenario):
                continue
            await self.follower.catch_up()
            if self.recipe.config.rollout is not None and self.follower.view.rollout_live(scenario):
                continue  # the live rollout decides before the next candidate trains
            self.intake.prune(scenario)
            batch = self.batcher.take(scenario, partial=partial)
            while batch is not None:
                await self._step(batch)
                await self.intake.commit()
                batch = self.batcher.take(scenario, partial=False)

    async def _step(self, batch: Batch) -> None:
        if self.tracing is None:
            await self._train_batch(batch, None)
            return
        samples = [(s.sample_id, s.report_id) for s in batch.samples]
        with self.tracing.training(batch.scenario, samples) as span:
            await self._train_batch(batch, span)

    async def _train_batch(self, batch: Batch, span: TrainingSpan | None) -> None:
        """Attempt the batch until the chain commits it, nothing is proposed, or the
        proposer gives it up (step 6); then its samples are decided."""
        self.progress.batches += 1
        rebases = 0
        ids = [s.sample_id for s in batch.samples]
        try:
            while batch.samples:
                decision = await self._attempt(batch)
                if span is not None and decision is not None:
                    span.decided(
                        committed=decision.committed,
                        release_id=decision.release_id,
                        reason=decision.reason,
                    )
                if decision is None or decision.committed:
                    return
                if not self.proposer.retries(decision, rebases):
                    return
                batch, rebases = self.intake.unconsumed(batch), rebases + 1
        finally:
            self.intake.decided(ids)

    async def _attempt(self, batch: Batch) -> ChainDecision | None:
        """Train, evaluate, gate and propose once; None when nothing was proposed."""
        await self.follower.catch_up()
        head = self.follower.view.head(batch.scenario)
        if head is None:
            raise TrainerError(f"scenario {batch.scenario} has no head release")
        release_id, content_id = head
        candidate_id = derived_id(
            "candidate", self.config.group, batch.scenario, release_id, *batch.sample_ids
        )
        step = TrainingStep(batch.scenario, release_id, len(batch.samples), time.time())
        self.progress.steps.append(step)
        logger.info(
            "training %d samples of %s on release %s",
            len(batch.samples),
            batch.scenario,
            release_id,
        )
        out_dir = self.config.work_dir / "candidates" / candidate_id
        try:
            parent = Parent(release_id, content_id, await self.releases.materialise(content_id))
            candidate = await self._train(batch, parent, out_dir, step)
            if candidate is None:
                return None
            gated = await self._gate(candidate_id, candidate.folder, parent, step)
            if gated is None or not (gated.selected or self._keeps_rejected(gated.candidate)):
                return None
            return await self.proposer.propose(batch, release_id, candidate, gated, step)
        finally:
            await asyncio.to_thread(shutil.rmtree, out_dir, True)
            await asyncio.to_thread(release_freed_memory)

    async def _train(
        self, batch: Batch, parent: Parent, out_dir: Path, step: TrainingStep
    ) -> Candidate | None:
        """Step 3's candidate; None when training failed (the batch is dropped, the
        trainer goes on)."""
        try:
            candidate = await self.candidates.train(batch, parent, out_dir)
        except Exception as exc:  # a failed candidate drops its batch, not the trainer
            self.progress.candidates["failed"] += 1
            step.outcome, step.reason = "training_failed", f"{type(exc).__name__}: {exc}"
            logger.error(
                "training on %s failed: %s",
                batch.scenario,
                exc,
                exc_info=not isinstance(exc, RecipeError),
            )
            return None
        step.training = candidate.metrics
        return candidate

    async def _gate(
        self, candidate_id: str, folder: Path, parent: Parent, step: TrainingStep
    ) -> Gated | None:
        """Step 4's decision; None when an evaluation failed."""
        try:
            gated = await self.candidates.gate(candidate_id, folder, parent)
        except EvaluationFailedError as exc:  # the gate fails closed
            self._rejected(step, "evaluation_failed", str(exc))
            return None
        step.candidate_score, step.baseline_score = gated.candidate.score, gated.baseline.score
        if gated.selected:
            logger.info("candidate selected (%s): %s", gated.decision.policy, gated.decision.reason)
        else:
            self._rejected(step, "gate_rejected", gated.decision.reason)
        return gated

    def _keeps_rejected(self, evaluation: Evaluation) -> bool:
        recipe = self.recipe
        return isinstance(recipe, ReleaseObserver) and recipe.keep_rejected(evaluation)

    def _rejected(self, step: TrainingStep, outcome: Outcome, reason: str) -> None:
        self.progress.candidates["rejected"] += 1
        step.outcome, step.reason = outcome, reason
        logger.warning(
            "candidate for %s rejected (%s): %s; the head keeps serving",
            step.scenario,
            outcome,
            reason,
        )

    # -- restart and status -------------------------------------------------------------

    def reset(self) -> None:
        """Forget what is only in memory, so :meth:`run` starts over from the committed
        offsets (as a restarted process would); the counters are kept."""
        self.follower.reset()
        self.batcher.clear()
        self.intake.reset()

    def status(self) -> dict[str, Any]:
        """Counters for GET /reef/status and ``reef trainer`` logs."""
        return {**self.progress.as_json(self.intake.pending), **self.intake.status()}


def _observer(recipe: Recipe[Any]) -> Callable[[ReleaseCommitted], None] | None:
    """What feeds each committed release to a recipe that folds the chain (step 1)."""
    if not isinstance(recipe, ReleaseObserver):
        return None
    observer: ReleaseObserver = recipe
    return lambda event: observer.observe_release(release_fact(event))
