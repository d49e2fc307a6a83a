"""The API's read model: scenarios, release chains, rollouts, report ids, turn figures
and (with a price table) spend, folded from the log.

:class:`ApiState` is a pure fold over events (no I/O). :class:`ProjectionFollower`
feeds it by following the topics in ``FOLLOWED_TOPICS`` from the beginning (scenarios,
releases, reports, samples, engine loads, turns and judgements; ``SPEND_TOPICS`` adds the
recorded exchanges), so every API replica converges on the same state and a replay
rebuilds it; ``wait_for`` gives a writer read-your-writes on its own appends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from reef.core import topics
from reef.core.cost import SpendLedger
from reef.core.events import (
    EngineLoaded,
    EngineLoadFailed,
    Event,
    InferenceRecorded,
    ReleaseCommitted,
    ReleaseRejected,
    ReportRejected,
    ReportSubmitted,
    RolloutDecided,
    RolloutStarted,
    SampleJoined,
    ScenarioCreated,
    SessionExpired,
    TurnCompleted,
    TurnJudged,
)
from reef.core.ids import EMPTY_CONTENT_ID, content_hash
from reef.core.rollouts import RolloutBook
from reef.log.base import Position
from reef.services.eventstore import EventStore, StoredEvent

logger = logging.getLogger(__name__)

WAIT_SECONDS = 30.0
FOLLOWED_TOPICS = (
    topics.SCENARIOS,
    topics.RELEASES,
    topics.REPORTS,
    topics.SAMPLES,
    topics.ENGINE,
    topics.TURNS,
    topics.JUDGEMENTS,
)
#: followed too where spend is shown (a price table is set): every recorded exchange
SPEND_TOPICS = (*FOLLOWED_TOPICS, topics.INFERENCE)


@dataclass(slots=True)
class ReleaseView:
    release_id: str
    parent_release_id: str | None
    content_id: str
    operation: str
    created_at: datetime
    pending: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] = field(default_factory=dict)
    target_release_id: str | None = None

    def as_json(self, head: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "release_id": self.release_id,
            "parent_release_id": self.parent_release_id,
            "content_id": self.content_id,
            "operation": self.operation,
            "current": self.release_id == head,
            "pending": self.pending,
            "created_at": self.created_at.isoformat(),
            "metrics": self.metrics,
            "evaluation": self.evaluation,
        }
        if self.target_release_id is not None:
            body["rollback_target_release_id"] = self.target_release_id
        return body


@dataclass(slots=True)
class ScenarioView:
    name: str
    recipe: str
    created_at: datetime
    head: str
    releases: list[ReleaseView]

    def as_json(self) -> dict[str, Any]:
        return {
            "scenario": self.name,
            "recipe": self.recipe,
            "release_id": self.head,
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class ReportView:
    scenario: str
    content_hash: str


@dataclass(frozen=True, slots=True)
class Fate:
    """What the join decided for a report (the first decision for its id)."""

    status: str
    reason: str | None = None
    sample_id: str | None = None
    release_id: str | None = None


#: the decisions a judgement can reach, as labelled in status and metrics
DECISIONS = ("+1", "-1", "0")


def decision_label(score: int) -> str:
    return f"{score:+d}" if score else "0"


@dataclass(slots=True)
class TurnFigures:
    """One scenario's sessions and judgements: each fact counted once per event id."""

    completed: int = 0
    expired: int = 0
    #: judged turns by decision ("+1", "-1", "0"); a failed judgement is not among them
    judged: dict[str, int] = field(default_factory=dict)
    failed: int = 0

    @classmethod
    def total(cls, each: Iterable[TurnFigures]) -> TurnFigures:
        out = cls()
        for figures in each:
            out.completed += figures.completed
            out.expired += figures.expired
            out.failed += figures.failed
            for decision, count in figures.judged.items():
                out.judged[decision] = out.judged.get(decision, 0) + count
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "turns_completed": self.completed,
            "sessions_expired": self.expired,
            "turns_judged": {d: self.judged.get(d, 0) for d in DECISIONS},
            "judgements_failed": self.failed,
        }


class ApiState:
    """Pure fold of scenario, release and report events. The first ScenarioCreated wins."""

    def __init__(self) -> None:
        self.scenarios: dict[str, ScenarioView] = {}
        #: keyed by (scenario, report id): report ids are unique within a scenario
        self.reports: dict[tuple[str, str], ReportView] = {}
        self.fates: dict[tuple[str, str], Fate] = {}
        self._early: dict[str, list[ReleaseCommitted]] = {}
        #: the chain's decision on each proposal: ("committed", release id) or
        #: ("rejected", reason)
        self.decisions: dict[str, tuple[str, str]] = {}
        #: sample id → (scenario, report id), and samples a committed release consumed
        self.sample_reports: dict[str, tuple[str, str]] = {}
        self.consumed: dict[str, str] = {}
        #: (scenario, engine id) → (release id, weight version) it serves; load outcomes
        self.engines: dict[tuple[str, str], tuple[str, str]] = {}
        self.engine_loads: dict[str, int] = {}
        #: training candidates by outcome: committed by the chain, or rejected
        #: (by the chain, or by a trainer's evaluation gate, which proposes nothing)
        self.candidates: dict[str, int] = {}
        #: per scenario: completed turns, expired sessions and judgements (the first
        #: event per id counts: a redelivered turn or a raced judgement is one fact)
        self.turns: dict[str, TurnFigures] = {}
        self._turn_facts: set[str] = set()
        #: each scenario's head, held releases and rollouts (the pure fold routing reads)
        self.rollouts = RolloutBook()
        #: tokens and cost per scenario and release (only while reef.inference is followed)
        self.spend = SpendLedger()

    def samples_pending(self) -> int:
        return sum(1 for sample in self.sample_reports if sample not in self.consumed)

    def digest(self) -> str:
        """A hash of everything projected, equal on every replica and after replay."""
        body = {
            "scenarios": [
                [
                    v.name,
                    v.recipe,
                    v.head,
                    [[r.release_id, r.operation, r.pending] for r in v.releases],
                ]
                for v in sorted(self.scenarios.values(), key=lambda v: v.name)
            ],
            "reports": sorted([*k, v.content_hash] for k, v in self.reports.items()),
            "fates": sorted([*k, f.status, f.reason or ""] for k, f in self.fates.items()),
        }
        if self.turns:  # absent without sessions: such a deployment's digest is unchanged
            body["turns"] = sorted([name, f.as_json()] for name, f in self.turns.items())
        rollouts = sorted(
            [name, [[r.rollout_id, r.status, r.reason or ""] for r in view.rollouts]]
            for name, view in self.rollouts.scenarios.items()
            if view.rollouts
        )
        if rollouts:  # absent until a rollout starts, like the turns
            body["rollouts"] = rollouts
        return content_hash(body)

    def apply(self, event: Event) -> None:
        if isinstance(event, ScenarioCreated):
            self._created(event)
        elif isinstance(event, ReleaseCommitted):
            self._committed(event)
            self.rollouts.apply(event)
        elif isinstance(event, RolloutStarted | RolloutDecided):
            self.rollouts.apply(event)
        elif isinstance(event, ReportSubmitted):
            self.reports.setdefault(
                (event.scenario, event.event_id), ReportView(event.scenario, event.content_hash)
            )
        elif isinstance(event, SampleJoined):
            key = (event.scenario, event.report_id)
            self.sample_reports.setdefault(event.event_id, key)
            release = self.consumed.get(event.event_id)
            fate = (
                Fate("consumed", None, event.event_id, release)
                if release
                else Fate("accepted", None, event.event_id)
            )
            self.fates.setdefault(key, fate)
        elif isinstance(event, ReportRejected):
            self.fates.setdefault((event.scenario, event.report_id), Fate("rejected", event.reason))
        elif isinstance(event, ReleaseRejected):
            if event.proposal_id not in self.decisions:
                self.candidates["rejected"] = self.candidates.get("rejected", 0) + 1
            self.decisions.setdefault(event.proposal_id, ("rejected", event.reason))
        elif isinstance(event, EngineLoaded):
            self.engines[(event.scenario, event.engine_id)] = (
                event.release_id,
                event.weight_version,
            )
            self.engine_loads["loaded"] = self.engine_loads.get("loaded", 0) + 1
        elif isinstance(event, EngineLoadFailed):
            self.engine_loads["failed"] = self.engine_loads.get("failed", 0) + 1
        elif isinstance(event, TurnCompleted | SessionExpired | TurnJudged):
            self._turn_fact(event)
        elif isinstance(event, InferenceRecorded):
            self.spend.apply(event)

    def _turn_fact(self, event: TurnCompleted | SessionExpired | TurnJudged) -> None:
        if event.event_id in self._turn_facts:
            return
        self._turn_facts.add(event.event_id)
        figures = self.turns.setdefault(event.scenario, TurnFigures())
        if isinstance(event, TurnCompleted):
            figures.completed += 1
        elif isinstance(event, SessionExpired):
            figures.expired += 1
        elif event.failed:
            figures.failed += 1
        else:
            label = decision_label(event.score)
            figures.judged[label] = figures.judged.get(label, 0) + 1

    def _created(self, event: ScenarioCreated) -> None:
        if event.scenario in self.scenarios:
            return  # a racing replica's creation: the first in the log is the binding
        creation = ReleaseView(
            event.initial_release_id,
            None,
            event.seed_content_id or EMPTY_CONTENT_ID,
            "creation",
            event.occurred_at,
        )
        self.scenarios[event.scenario] = ScenarioView(
            event.scenario, event.recipe, event.occurred_at, creation.release_id, [creation]
        )
        for early in self._early.pop(event.scenario, []):
            self._committed(early)

    def _committed(self, event: ReleaseCommitted) -> None:
        if event.operation == "training" and event.proposal_id not in self.decisions:
            self.candidates["committed"] = self.candidates.get("committed", 0) + 1
        self.decisions.setdefault(event.proposal_id, ("committed", event.release_id))
        for sample in event.sample_ids:
            if self.consumed.setdefault(sample, event.release_id) != event.release_id:
                continue
            key = self.sample_reports.get(sample)
            if key is not None:
                self.fates[key] = Fate("consumed", None, sample, event.release_id)
        view = self.scenarios.get(event.scenario)
        if view is None:  # topics are followed independently: the creation may lag
            self._early.setdefault(event.scenario, []).append(event)
            return
        if any(r.release_id == event.release_id for r in view.releases):
            return
        view.releases.append(
            ReleaseView(
                event.release_id,
                event.parent_release_id,
                event.content_id,
                event.operation,
                event.occurred_at,
                event.pending,
                json.loads(event.metrics_json),
                json.loads(event.evaluation_json),
                event.target_release_id,
            )
        )
        if event.operation == "promote":
            for release in view.releases:
                if release.release_id == event.target_release_id:
                    release.pending = False
        if not event.pending:
            view.head = event.release_id


class ProjectionFollower:
    """Follows the projected topics into an :class:`ApiState` and tracks positions."""

    def __init__(
        self,
        store: EventStore,
        state: ApiState | None = None,
        followed: tuple[str, ...] = FOLLOWED_TOPICS,
    ) -> None:
        self.store = store
        self.state = state or ApiState()
        self._followed = followed
        self._next: dict[tuple[str, int], int] = {}
        self._changed = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start following and return once everything present at start is applied."""
        # Catch up to the end offsets first, then follow from exactly there: waiting for
        # the record at end-1 would hang when that offset is a transaction marker.
        for topic in self._followed:
            ends = await self.store.log.end_offsets(topic)
            async for stored in self.store.read(topic, until=ends, raw=True):
                self._apply(topic, stored)
            for partition, offset in ends.items():
                self._next[(topic, partition)] = max(self._next.get((topic, partition), 0), offset)
            self._tasks.append(
                asyncio.create_task(self._follow(topic, ends), name=f"projection:{topic}")
            )

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def wait_for(self, position: Position) -> None:
        """Return once the record at ``position`` has been applied (at most 30 s)."""
        slot = (position.topic, position.partition)
        async with asyncio.timeout(WAIT_SECONDS), self._changed:
            await self._changed.wait_for(lambda: self._next.get(slot, 0) > position.offset)

    async def wait_until(self, predicate: Callable[[ApiState], bool], seconds: float) -> bool:
        """Wait until the projected state satisfies ``predicate``; False on timeout."""
        try:
            async with asyncio.timeout(seconds), self._changed:
                await self._changed.wait_for(lambda: predicate(self.state))
        except TimeoutError:
            return False
        return True

    async def wait_for_all(self, positions: Iterable[Position]) -> None:
        for position in positions:
            await self.wait_for(position)

    def healthy(self) -> bool:
        return all(not task.done() for task in self._tasks)

    def _apply(self, topic: str, stored: StoredEvent) -> None:
        record = stored.record
        if stored.event is not None:
            self.state.apply(stored.event)
        else:
            logger.error(
                "undecodable record %s/%d@%d: %s",
                topic,
                record.partition,
                record.offset,
                stored.error,
            )
        self._next[(topic, record.partition)] = record.offset + 1

    async def _follow(self, topic: str, start: dict[int, int]) -> None:
        async for stored in self.store.read(topic, start=start, follow=True, raw=True):
            async with self._changed:
                self._apply(topic, stored)
                self._changed.notify_all()
