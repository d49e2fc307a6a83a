"""What a trainer knows of the release chain: a pure fold, and a follower that feeds it.

:class:`ChainView` folds ``reef.scenarios`` (each scenario's recipe), ``reef.releases``
(heads, release heights, consumed sample ids, decisions) and ``reef.release-proposals``
(proposals, to find this trainer group's undecided ones after a restart), and the
scenarios' rollouts by the API's own fold (:class:`reef.core.rollouts.RolloutBook`). A release's
*height* is its position in the scenario's line of serving releases (creation = 0), so
the staleness of a sample is ``height(head) - height(release that served it)``.

:class:`ChainFollower` catches the view up to the log's current end on demand (no
background task: callers catch up before they decide, and poll while they wait). A recipe
that folds the chain (:class:`recipes.releases.ReleaseObserver`) is fed each committed
release once per view, in log order, as :func:`release_fact` decodes it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from recipes.releases import ReleaseFact
from reef.core import topics
from reef.core.events import (
    Event,
    ReleaseCommitted,
    ReleaseProposed,
    ReleaseRejected,
    RolloutDecided,
    RolloutStarted,
    ScenarioCreated,
)
from reef.core.rollouts import RolloutBook
from reef.services.eventstore import EventStore, StoredEvent


@dataclass(frozen=True, slots=True)
class ChainDecision:
    """The chain's answer to one proposal."""

    committed: bool
    release_id: str | None = None
    reason: str | None = None
    head_release_id: str | None = None


@dataclass(slots=True)
class ScenarioChain:
    head: str | None = None
    heights: dict[str, int] = field(default_factory=dict)
    contents: dict[str, str] = field(default_factory=dict)


class ChainView:
    """Pure fold; apply events in log order per topic (topics may interleave freely)."""

    def __init__(self) -> None:
        self.recipes: dict[str, str] = {}
        self.chains: dict[str, ScenarioChain] = {}
        #: sample id → the committed release that consumed it
        self.consumed: dict[str, str] = {}
        self.decisions: dict[str, ChainDecision] = {}
        self.proposals: dict[str, ReleaseProposed] = {}
        #: every committed release, in log order (what a ReleaseObserver recipe folds)
        self.releases: dict[str, ReleaseCommitted] = {}
        self.rollouts = RolloutBook()

    def apply(self, event: Event) -> None:
        if isinstance(event, ReleaseCommitted | RolloutStarted | RolloutDecided):
            self.rollouts.apply(event)
        if isinstance(event, ScenarioCreated):
            self.recipes.setdefault(event.scenario, event.recipe)
        elif isinstance(event, ReleaseCommitted):
            self._committed(event)
        elif isinstance(event, ReleaseRejected):
            self.decisions.setdefault(
                event.proposal_id,
                ChainDecision(False, reason=event.reason, head_release_id=event.head_release_id),
            )
        elif isinstance(event, ReleaseProposed):
            self.proposals.setdefault(event.proposal_id, event)

    def _committed(self, event: ReleaseCommitted) -> None:
        chain = self.chains.setdefault(event.scenario, ScenarioChain())
        self.decisions.setdefault(
            event.proposal_id,
            ChainDecision(True, release_id=event.release_id, head_release_id=event.release_id),
        )
        for sample in event.sample_ids:
            self.consumed.setdefault(sample, event.release_id)
        chain.contents.setdefault(event.release_id, event.content_id)
        self.releases.setdefault(event.release_id, event)
        if event.pending or event.release_id in chain.heights:
            return
        chain.heights[event.release_id] = len(chain.heights)
        chain.head = event.release_id

    def head(self, scenario: str) -> tuple[str, str] | None:
        """(release id, content id) of the scenario's head, once known."""
        chain = self.chains.get(scenario)
        if chain is None or chain.head is None:
            return None
        return chain.head, chain.contents[chain.head]

    def rollout_live(self, scenario: str) -> bool:
        """Whether a rollout of the scenario is live or its promotion not committed yet."""
        view = self.rollouts.scenario(scenario)
        return view is not None and (view.active or view.promotion_pending) is not None

    def staleness(self, scenario: str, release_ids: Iterable[str]) -> int | None:
        """Releases the head is ahead of the oldest serving release; None if one is unknown."""
        chain = self.chains.get(scenario)
        if chain is None or chain.head is None:
            return None
        served = list(release_ids)
        if not served or any(r not in chain.heights for r in served):
            return None
        return chain.heights[chain.head] - min(chain.heights[r] for r in served)

    def undecided(self, producer_prefix: str) -> list[str]:
        """Proposals made by producers named ``<prefix>...`` that have no decision yet."""
        return [
            proposal_id
            for proposal_id, event in self.proposals.items()
            if event.producer.startswith(producer_prefix) and proposal_id not in self.decisions
        ]


FOLLOWED = (topics.SCENARIOS, topics.RELEASES, topics.RELEASE_PROPOSALS)


class ChainFollower:
    """Reads the followed topics from where it stopped to their current end; each release
    the view commits, in log order, goes to ``on_release`` (when given) after the catch-up
    that read it."""

    def __init__(
        self,
        store: EventStore,
        view: ChainView | None = None,
        *,
        on_release: Callable[[ReleaseCommitted], None] | None = None,
    ) -> None:
        self.store = store
        self.view = view or ChainView()
        self.on_release = on_release
        self._positions: dict[str, dict[int, int]] = {topic: {} for topic in FOLLOWED}
        self._observed = 0  # committed releases given to on_release

    async def catch_up(self) -> None:
        """Read the three topics at once (on Kafka each read is a consumer of its own, slow
        to start), then apply them in FOLLOWED order: scenarios, releases, proposals."""
        read = await asyncio.gather(*(self._read_new(topic) for topic in FOLLOWED))
        for topic, records in zip(FOLLOWED, read, strict=True):
            positions = self._positions[topic]
            for stored in records:
                positions[stored.record.partition] = stored.record.offset + 1
                if stored.event is not None:
                    self.view.apply(stored.event)
        self._observe()

    def reset(self) -> None:
        """Forget the view: the next catch-up folds the chain from the start, and
        ``on_release`` sees every release again (an observer ignores repeats)."""
        self.view = ChainView()
        self._positions = {topic: {} for topic in FOLLOWED}
        self._observed = 0

    def _observe(self) -> None:
        if self.on_release is None:
            return
        releases = list(self.view.releases.values())
        for event in releases[self._observed :]:
            self.on_release(event)
        self._observed = len(releases)

    async def _read_new(self, topic: str) -> list[StoredEvent]:
        return [s async for s in self.store.read(topic, start=dict(self._positions[topic]))]


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


def _object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
