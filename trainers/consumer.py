"""The trainer: a consumer of ``reef.samples`` (group ``trainer:<recipe>``) driving a recipe.

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
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipes.base import Batch, Evaluation, MissingGroupKeyError, Parent, Recipe
from recipes.errors import RecipeError
from recipes.releases import ReleaseFact, ReleaseObserver
from recipes.samples import ClaimResolver, Sample, sample_from_event
from reef.artifacts import materialise_cached
from reef.artifacts.content import ContentStore
from reef.core import topics
from reef.core.errors import ReefError
from reef.core.events import ReleaseCommitted, ReleaseProposed, SampleJoined, utc_now
from reef.core.ids import EMPTY_CONTENT_ID, canonical_json, derived_id
from reef.core.shadow import trains
from reef.log.base import LogRecord
from reef.observability.tracing import Tracing, TrainingSpan
from reef.services.eventstore import EventStore
from trainers.batcher import Batcher
from trainers.candidates import CandidatePipeline, EvaluationFailedError
from trainers.chainview import ChainDecision, ChainFollower
from trainers.heap import release_freed_memory
from trainers.progress import Outcome, Progress, TrainingStep
from trainers.publish import Publisher, publishes

logger = logging.getLogger("reef.trainer")

POLL_SECONDS = 0.2
#: how long a sample served by a release the chain has not committed yet is held before it
#: is skipped as ``unknown_release``: a scenario's creation release is committed by the
#: chain processor after the API already serves it, so the join can get there first
RELEASE_WAIT_S = 60.0


class TrainerError(ReefError):
    """The trainer cannot go on (e.g. the chain never decided a proposal)."""


@dataclass(frozen=True, slots=True)
class TrainerConfig:
    recipe_name: str
    producer: str
    work_dir: Path
    #: partitions of ``reef.samples`` this trainer owns (None: all of them)
    partitions: tuple[int, ...] | None = None
    #: seconds a sample of a release the chain does not know yet waits for it
    release_wait_s: float = RELEASE_WAIT_S

    @property
    def group(self) -> str:
        return f"trainer:{self.recipe_name}"


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
        #: pushes a release committed as the head to engines (:mod:`trainers.publish`)
        self.publisher = publisher
        #: spans of training steps, when the process traces (reef.observability.tracing)
        self.tracing = tracing
        self.store = store
        self.content = content
        self.config = config
        self.resolve = resolve
        self.follower = ChainFollower(store)
        self.batcher = Batcher(recipe.config.batching)
        self.progress = Progress(config.recipe_name, config.group)
        self._read: dict[int, int] = {}
        self._committed: dict[int, int] = {}
        self._pending: dict[str, tuple[int, int]] = {}
        #: samples held until the chain commits the release that served them: id → (first
        #: seen, monotonic; the sample); their offsets stay in ``_pending``
        self._unresolved: dict[str, tuple[float, Sample]] = {}
        #: train, evaluate (each once), gate (:mod:`trainers.candidates`)
        self.candidates = CandidatePipeline(recipe)
        self._queue: asyncio.Queue[LogRecord] = asyncio.Queue(maxsize=1000)
        self._observed = 0  # committed releases fed to an observing recipe
        if isinstance(recipe, ReleaseObserver):
            recipe.bind_contents(self._open_content)

    # -- the loop ----------------------------------------------------------------------

    async def run(self) -> None:
        self.progress.running = True
        try:
            await self._start()
            reader = asyncio.create_task(self._reader(), name="trainer-reader")
            try:
                await self._loop(reader)
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
        finally:
            self.progress.running = False

    async def _start(self) -> None:
        await self._catch_up()
        for proposal_id in self.follower.view.undecided(self.config.group + "/"):
            logger.info("waiting for the chain's decision on earlier proposal %s", proposal_id)
            await self._decision(proposal_id)
        committed = await self.store.log.committed(self.config.group, topics.SAMPLES)
        owned = self._owned()
        self._read = {p: committed.get(p, 0) for p in owned}
        self._committed = dict(self._read)
        logger.info(
            "trainer %s (%s) starts at %s",
            self.config.group,
            self.recipe.name,
            {p: o for p, o in self._read.items() if o},
        )

    async def _catch_up(self) -> None:
        await self.follower.catch_up()
        if not isinstance(self.recipe, ReleaseObserver):
            return
        releases = list(self.follower.view.releases.values())
        for event in releases[self._observed :]:
            self.recipe.observe_release(release_fact(event))
        self._observed = len(releases)

    def _open_content(self, content_id: str) -> Path | None:
        """A release's files by content id (blocking: recipes call it in worker threads)."""
        if content_id == EMPTY_CONTENT_ID:
            return None
        manifest = self.content.load(content_id)
        return materialise_cached(self.content.store, manifest, self.config.work_dir / "releases")

    def _owned(self) -> list[int]:
        if self.config.partitions is not None:
            return list(self.config.partitions)
        return list(range(self.store.log.partitions))

    async def _reader(self) -> None:
        async for record in self.store.log.read(
            topics.SAMPLES, start=dict(self._read), partitions=self._owned(), follow=True
        ):
            await self._queue.put(record)

    async def _loop(self, reader: asyncio.Task[None]) -> None:
        wait = self.recipe.config.batching.max_wait_s
        while True:
            if reader.done():
                reader.result()  # re-raise the reader's failure
                raise TrainerError("the sample reader stopped")
            try:
                record = await asyncio.wait_for(self._queue.get(), wait or 1.0)
            except TimeoutError:  # full batches held back by a live rollout are retried
                await self._admit_unresolved()
                await self._train_ready(partial=wait is not None)
                await self._commit()
                continue
            await self._ingest(record)
            if self._queue.empty():
                await self._admit_unresolved()
                await self._train_ready(partial=False)
                await self._commit()

    # -- step 2: admission ----------------------------------------------------------------

    async def _ingest(self, record: LogRecord) -> None:
        self._read[record.partition] = record.offset + 1
        stored = self.store.decode(record)
        event = stored.event
        if not isinstance(event, SampleJoined):
            return
        view = self.follower.view
        if event.scenario not in view.recipes or (
            view.staleness(event.scenario, event.release_ids) is None
        ):
            await self._catch_up()
        if view.recipes.get(event.scenario) != self.config.recipe_name:
            return
        self.progress.samples_read += 1
        if not trains(event):  # it holds a shadow copy: it scored a candidate, it never trains
            self._skip(event.event_id, event.scenario, "shadow_exchange")
            return
        if (
            event.event_id in view.consumed
            or event.event_id in self.batcher
            or event.event_id in self._unresolved
        ):
            if event.event_id in view.consumed:
                self.progress.skip(event.event_id, event.scenario, "already_consumed")
            return
        stored = await self.store.open(stored)  # sealed trajectories opened
        if stored.erased or not isinstance(stored.event, SampleJoined):
            # a record of it was erased (its content is gone), or it does not open
            self._skip(event.event_id, event.scenario, "erased", stored.error or "")
            return
        event = stored.event
        try:
            sample = await asyncio.to_thread(
                sample_from_event,
                event,
                partition=record.partition,
                offset=record.offset,
                resolve=self.resolve,
            )
        except ReefError as exc:
            self._skip(event.event_id, event.scenario, "unreadable", str(exc))
            return
        self._admit(sample)

    def _admit(self, sample: Sample) -> None:
        reason = self._reason(sample)
        if reason == "unknown_release" and self._wait_for_release(sample):
            return
        self._unresolved.pop(sample.sample_id, None)
        if reason is not None:
            self._skip(sample.sample_id, sample.scenario, reason)
            return
        try:
            group = self.recipe.group_of(sample)
        except MissingGroupKeyError as exc:
            self._skip(sample.sample_id, sample.scenario, "missing_group_key", str(exc))
            return
        self.batcher.add(sample, group)
        self._pending[sample.sample_id] = (sample.partition, sample.offset)

    def _wait_for_release(self, sample: Sample) -> bool:
        """Hold a sample whose serving release the chain has not committed (yet); False
        once it has waited ``release_wait_s`` (then it is skipped as ``unknown_release``)."""
        now = time.monotonic()
        since = self._unresolved.get(sample.sample_id, (now, sample))[0]
        if now - since >= self.config.release_wait_s:
            return False
        self._unresolved[sample.sample_id] = (since, sample)
        self._pending[sample.sample_id] = (sample.partition, sample.offset)
        return True

    async def _admit_unresolved(self) -> None:
        """Admit held samples whose release the chain has committed since (or that waited
        long enough to be skipped)."""
        if not self._unresolved:
            return
        await self._catch_up()
        for _, sample in list(self._unresolved.values()):
            self._pending.pop(sample.sample_id, None)
            self._admit(sample)

    def _reason(self, sample: Sample) -> str | None:
        if sample.sample_id in self.follower.view.consumed:
            return "already_consumed"
        staleness = self.follower.view.staleness(sample.scenario, sample.release_ids)
        return self.recipe.admit(sample, staleness)

    def _skip(self, sample_id: str, scenario: str, reason: str, detail: str = "") -> None:
        self.progress.skip(sample_id, scenario, reason, detail)
        logger.info("sample %s of %s skipped: %s %s", sample_id, scenario, reason, detail)

    # -- steps 3-6: batches -------------------------------------------------------------

    async def _train_ready(self, *, partial: bool) -> None:
        for scenario in self.batcher.scenarios():
            if not partial and not self.batcher.ready(scenario):
                continue
            await self._catch_up()
            if self.recipe.config.rollout is not None and self.follower.view.rollout_live(scenario):
                continue  # the live rollout decides before the next candidate trains
            for sample, reason in self.batcher.prune(scenario, self._reason):
                self._pending.pop(sample.sample_id, None)
                self._skip(sample.sample_id, scenario, reason)
            batch = self.batcher.take(scenario, partial=partial)
            while batch is not None:
                await self._step(batch)
                await self._commit()
                batch = self.batcher.take(scenario, partial=False)

    async def _step(self, batch: Batch) -> None:
        if self.tracing is None:
            await self._train_batch(batch, None)
            return
        samples = [(s.sample_id, s.report_id) for s in batch.samples]
        with self.tracing.training(batch.scenario, samples) as span:
            await self._train_batch(batch, span)

    async def _train_batch(self, batch: Batch, span: TrainingSpan | None) -> None:
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
                retry = self._retry(batch, decision, rebases)
                if retry is None:
                    return
                batch, rebases = retry, rebases + 1
        finally:
            self.batcher.release(ids)
            for sample_id in ids:
                self._pending.pop(sample_id, None)

    def _retry(self, batch: Batch, decision: ChainDecision, rebases: int) -> Batch | None:
        """The batch to train again after a chain rejection, or None to drop it.

        Units holding a sample that another release consumed meanwhile are left out.
        """
        if rebases >= self.recipe.config.max_rebases:
            return None
        stale = decision.reason == "stale_parent" and self.recipe.config.on_stale == "rebase"
        if not stale and decision.reason != "samples_already_consumed":
            return None
        if stale:
            logger.info("the head moved to %s: re-basing the batch", decision.head_release_id)
        consumed = self.follower.view.consumed
        groups = tuple(g for g in batch.groups if not any(s.sample_id in consumed for s in g))
        for group in batch.groups:
            if group not in groups:
                for sample in group:
                    self._skip(sample.sample_id, batch.scenario, "already_consumed")
        return Batch(batch.scenario, groups)

    async def _attempt(self, batch: Batch) -> ChainDecision | None:
        """Train, evaluate, gate and propose once; None when nothing was proposed."""
        await self._catch_up()
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
            return await self._candidate(batch, release_id, content_id, candidate_id, out_dir, step)
        finally:
            await asyncio.to_thread(shutil.rmtree, out_dir, True)
            await asyncio.to_thread(release_freed_memory)

    async def _candidate(
        self,
        batch: Batch,
        release_id: str,
        content_id: str,
        candidate_id: str,
        out_dir: Path,
        step: TrainingStep,
    ) -> ChainDecision | None:
        parent = Parent(release_id, content_id, await self._materialise(content_id))
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
        gated = await self._gate(candidate_id, candidate.folder, parent, step)
        if gated is None:
            return None
        selected, verdict, evaluation = gated
        if not selected and not self._keeps_rejected(evaluation):
            return None
        new_content = await asyncio.to_thread(self.content.publish_dir, candidate.folder)
        rollout = self.recipe.config.rollout if selected else None
        proposal = self._proposal(
            batch,
            release_id,
            new_content,
            candidate.metrics,
            verdict,
            pending=not selected or rollout is not None,
            rollout_json=None if rollout is None else rollout.policy_json(),
        )
        await self.store.append(proposal)
        self.progress.proposals["proposed"] += 1
        logger.info(
            "proposed %s on %s (%d samples); waiting for the chain",
            proposal.proposal_id,
            release_id,
            len(batch.samples),
        )
        decision = await self._decision(proposal.proposal_id)
        self._record(step, proposal.proposal_id, decision, pending=not selected)
        if (
            self.publisher is not None
            and decision.release_id is not None
            and publishes(decision, pending=not selected or rollout is not None)
        ):
            outcome = await asyncio.to_thread(
                self.publisher.publish, candidate.folder, decision.release_id
            )
            self.progress.publishes[outcome] += 1
        if rollout is not None and decision.committed:
            step.rollout = rollout.mode  # the chain started it with the release
        return decision

    def _keeps_rejected(self, evaluation: Evaluation) -> bool:
        recipe = self.recipe
        return isinstance(recipe, ReleaseObserver) and recipe.keep_rejected(evaluation)

    async def _gate(
        self, candidate_id: str, folder: Path, parent: Parent, step: TrainingStep
    ) -> tuple[bool, dict[str, Any], Evaluation] | None:
        """Evaluate and decide: (selected, the verdict's JSON, the candidate's
        evaluation); None when an evaluation failed."""
        try:
            gated = await self.candidates.gate(candidate_id, folder, parent)
        except EvaluationFailedError as exc:  # the gate fails closed
            self._rejected(step, "evaluation_failed", str(exc))
            return None
        step.candidate_score, step.baseline_score = gated.candidate.score, gated.baseline.score
        if not gated.selected:
            self._rejected(step, "gate_rejected", gated.decision.reason)
            return False, gated.verdict(), gated.candidate
        logger.info("candidate selected (%s): %s", gated.decision.policy, gated.decision.reason)
        return True, gated.verdict(), gated.candidate

    def _rejected(self, step: TrainingStep, outcome: Outcome, reason: str) -> None:
        self.progress.candidates["rejected"] += 1
        step.outcome, step.reason = outcome, reason
        logger.warning(
            "candidate for %s rejected (%s): %s; the head keeps serving",
            step.scenario,
            outcome,
            reason,
        )

    async def _materialise(self, content_id: str) -> Path | None:
        if content_id == EMPTY_CONTENT_ID:
            return None
        manifest = await asyncio.to_thread(self.content.load, content_id)
        cache = self.config.work_dir / "releases"
        return await asyncio.to_thread(materialise_cached, self.content.store, manifest, cache)

    def _proposal(
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

    async def _decision(self, proposal_id: str) -> ChainDecision:
        deadline = time.monotonic() + self.recipe.config.decision_timeout_s
        while True:
            await self._catch_up()
            decision = self.follower.view.decisions.get(proposal_id)
            if decision is not None:
                return decision
            if time.monotonic() > deadline:
                raise TrainerError(
                    f"no decision on proposal {proposal_id} within "
                    f"{self.recipe.config.decision_timeout_s:.0f}s: is the release chain running?"
                )
            await asyncio.sleep(POLL_SECONDS)

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

    # -- step 7: offsets ------------------------------------------------------------------

    async def _commit(self) -> None:
        target = dict(self._read)
        for partition, offset in self._pending.values():
            target[partition] = min(target.get(partition, offset), offset)
        changed = {p: o for p, o in target.items() if self._committed.get(p) != o}
        if changed:
            await self.store.log.commit(self.config.group, topics.SAMPLES, changed)
            self._committed.update(changed)

    def reset(self) -> None:
        """Forget what is only in memory, so :meth:`run` starts over from the committed
        offsets (as a restarted process would); the counters are kept."""
        self.follower = ChainFollower(self.store)
        self.batcher = Batcher(self.recipe.config.batching)
        self._pending.clear()
        self._unresolved.clear()
        self._queue = asyncio.Queue(maxsize=1000)
        self._observed = 0  # the new view replays the chain; observers ignore repeats

    # -- status ---------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Counters for GET /reef/status and ``reef trainer`` logs."""
        body = self.progress.as_json(len(self._pending))
        body["samples_waiting_for_release"] = len(self._unresolved)
        body["committed_offsets"] = {str(p): o for p, o in sorted(self._committed.items()) if o}
        return body


def release_fact(event: ReleaseCommitted) -> ReleaseFact:
    """A committed release as a recipe sees it (its JSON fields decoded)."""
    return ReleaseFact(
        scenario=event.scenario,
        release_id=event.release_id,
        content_id=event.content_id,
        operation=event.operation,
        parent_release_id=event.parent_release_id,
        pending=event.pending,
        metrics=_object(event.metrics_json),
        evaluation=_object(event.evaluation_json),
    )


def _or_nan(score: float | None) -> float:
    return float("nan") if score is None else score


def _object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
