"""Rollouts: a held release serving beside the head until live outcomes decide it.

A rollout is two facts on ``reef.releases``, keyed by scenario: ``RolloutStarted`` (a
pending release, the candidate, serves beside the head under a policy: ``canary`` takes
a share of the sessions, ``shadow`` answers a copy of a share, never returned) and
``RolloutDecided`` (promoted or rolled back, with the reason and the figures). Its state
is a fold over ``reef.releases`` alone (:class:`RolloutBook`): the chain's
``ReleaseCommitted`` events give the head and the held releases, so the head, the
candidate and the share are rebuilt from the log like everything else.

The rules, per scenario, in log order:

1. ``ReleaseCommitted`` of a release already seen: nothing (a redelivery).
2. ``ReleaseCommitted`` with ``pending``: the release is held (a possible candidate).
3. ``ReleaseCommitted`` without ``pending``: it is the head; a ``promote`` releases its
   target from the held set. An active rollout ends ``superseded`` (reason
   ``head_moved``): the head it compared against no longer serves.
4. A rollout event counts at its first appearance only: its id is remembered, applied
   or refused, so a copy later in the log (a producer's retry) does nothing, even where
   the state has since come to accept it.
5. ``RolloutStarted``: applied only if :func:`validate` accepts it against the state
   before it; anything refused (a second start racing the first, a reused rollout id, a
   stale head, a candidate that is not held) is ignored, so the first valid start stands.
6. ``RolloutDecided``: applied only to the scenario's active rollout; a decision on an
   unknown, decided or superseded rollout is ignored.
7. ``ReleaseRejected`` and everything else: nothing.

A promoted rollout's candidate serves all traffic until the chain commits the
promotion (the wiring proposes the chain's ``promote`` of the candidate); the new head
then ends it as rule 3 would. A rolled-back candidate stays in the chain, held and
marked: it may not be rolled out again, since trying the same candidate until it passes
would multiply the false-promotion rate. The head the API serves is still the chain's
(:mod:`reef.core.chain`); routing between the arms is :mod:`reef.core.routing`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, Final

from reef.core.events import Event, ReleaseCommitted, RolloutDecided, RolloutStarted
from reef.core.live_decision import REASONS, DecisionRule

MODES: Final = ("canary", "shadow")
OUTCOMES: Final = ("promoted", "rolled_back")


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutPolicy:
    """How a candidate is tried: the mode, its share, and when the test may decide."""

    mode: str
    share: float
    min_exchanges: int
    max_duration_s: float
    alpha: float = 0.05
    #: the latency objective whose exceedance rate is tested (None: latency not tested)
    latency_slo_ms: float | None = None

    @classmethod
    def of(cls, event: RolloutStarted) -> RolloutPolicy:
        return cls(
            mode=event.mode,
            share=event.share,
            min_exchanges=event.min_exchanges,
            max_duration_s=event.max_duration_s,
            alpha=event.alpha,
            latency_slo_ms=event.latency_slo_ms,
        )

    def problem(self) -> str | None:
        """What is wrong with the policy, or None."""
        if self.mode not in MODES:
            return f"mode must be one of {', '.join(MODES)}"
        # a canary at 100% would leave the head nothing to be compared on
        top_ok = self.share < 1.0 if self.mode == "canary" else self.share <= 1.0
        if not (self.share > 0.0 and top_ok):
            return "share must be in (0, 1) for a canary, (0, 1] for a shadow"
        if self.min_exchanges < 1 or not self.max_duration_s > 0.0:
            return "min_exchanges must be at least 1 and max_duration_s positive"
        if not 0.0 < self.alpha < 1.0:
            return "alpha must be in (0, 1)"
        if self.latency_slo_ms is not None and not self.latency_slo_ms > 0.0:
            return "latency_slo_ms must be positive"
        return None

    def decision_rule(self) -> DecisionRule:
        """The live decision's rule: each candidate outcome meets the mean of about as
        many head outcomes as the head serves per candidate outcome."""
        per_candidate = (1.0 - self.share) / self.share if self.mode == "canary" else 1 / self.share
        return DecisionRule(
            alpha=self.alpha,
            min_exchanges=self.min_exchanges,
            max_duration_s=self.max_duration_s,
            head_group=max(1, round(per_candidate)),
            latency_slo_ms=self.latency_slo_ms,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Rollout:
    """One rollout as the log tells it; ``status`` is ``active``, an outcome of
    :data:`OUTCOMES`, or ``superseded``."""

    rollout_id: str
    head_release_id: str
    candidate_release_id: str
    policy: RolloutPolicy
    started_at: datetime
    status: str = "active"
    reason: str | None = None
    ended_at: datetime | None = None
    figures_json: str = "{}"

    @property
    def active(self) -> bool:
        return self.status == "active"


@dataclass(slots=True)
class ScenarioRollouts:
    """One scenario's chain as rollouts need it, and its rollouts in start order."""

    head: str | None = None
    releases: set[str] = field(default_factory=set)
    #: committed with ``pending`` and not promoted since: the possible candidates
    held: set[str] = field(default_factory=set)
    rollouts: list[Rollout] = field(default_factory=list)
    #: event ids of the rollout events seen, applied or refused (rule 4)
    seen: set[str] = field(default_factory=set)

    @property
    def current(self) -> Rollout | None:
        """The latest rollout, whatever its status."""
        return self.rollouts[-1] if self.rollouts else None

    @property
    def active(self) -> Rollout | None:
        current = self.current
        return current if current is not None and current.active else None

    @property
    def promotion_pending(self) -> Rollout | None:
        """A promoted rollout whose promotion the chain has not committed yet."""
        current = self.current
        if current is None or current.status != "promoted":
            return None
        return current if current.head_release_id == self.head else None

    def marks(self, release_id: str) -> list[str]:
        """The outcomes of the rollouts this release was the candidate of."""
        return [r.status for r in self.rollouts if r.candidate_release_id == release_id]

    def snapshot(self) -> dict[str, Any]:
        """This state as JSON-ready values (sets sorted), for a processor's state."""
        return {
            "head": self.head,
            "releases": sorted(self.releases),
            "held": sorted(self.held),
            "rollouts": [_rollout_json(r) for r in self.rollouts],
            "seen": sorted(self.seen),
        }

    @classmethod
    def restored(cls, values: dict[str, Any]) -> ScenarioRollouts:
        return cls(
            head=values["head"],
            releases=set(values["releases"]),
            held=set(values["held"]),
            rollouts=[_rollout_of(r) for r in values["rollouts"]],
            seen=set(values["seen"]),
        )


def _rollout_json(rollout: Rollout) -> dict[str, Any]:
    return {
        "rollout_id": rollout.rollout_id,
        "head_release_id": rollout.head_release_id,
        "candidate_release_id": rollout.candidate_release_id,
        "policy": asdict(rollout.policy),
        "started_at": rollout.started_at.isoformat(),
        "status": rollout.status,
        "reason": rollout.reason,
        "ended_at": None if rollout.ended_at is None else rollout.ended_at.isoformat(),
        "figures_json": rollout.figures_json,
    }


def _rollout_of(values: dict[str, Any]) -> Rollout:
    ended = values["ended_at"]
    return Rollout(
        rollout_id=values["rollout_id"],
        head_release_id=values["head_release_id"],
        candidate_release_id=values["candidate_release_id"],
        policy=RolloutPolicy(**values["policy"]),
        started_at=datetime.fromisoformat(values["started_at"]),
        status=values["status"],
        reason=values["reason"],
        ended_at=None if ended is None else datetime.fromisoformat(ended),
        figures_json=values["figures_json"],
    )


@dataclass(slots=True)
class RolloutBook:
    """The fold of ``reef.releases`` into rollout state, per scenario (pure, no I/O);
    two books are equal when they hold the same state (replay-equal)."""

    scenarios: dict[str, ScenarioRollouts] = field(default_factory=dict)

    def scenario(self, name: str) -> ScenarioRollouts | None:
        return self.scenarios.get(name)

    def apply(self, event: Event) -> None:
        if isinstance(event, ReleaseCommitted):
            self._committed(event)
        elif isinstance(event, RolloutStarted | RolloutDecided):
            refused = validate(self, event)
            self.scenarios.setdefault(event.scenario, ScenarioRollouts()).seen.add(event.event_id)
            if refused is not None:
                return
            if isinstance(event, RolloutStarted):
                self._started(event)
            else:
                self._decided(event)

    def _committed(self, event: ReleaseCommitted) -> None:
        view = self.scenarios.setdefault(event.scenario, ScenarioRollouts())
        if event.release_id in view.releases:
            return
        view.releases.add(event.release_id)
        if event.pending:
            view.held.add(event.release_id)
            return
        if event.operation == "promote" and event.target_release_id:
            view.held.discard(event.target_release_id)
        view.head = event.release_id
        active = view.active
        if active is not None:
            ended = replace(
                active, status="superseded", reason="head_moved", ended_at=event.occurred_at
            )
            view.rollouts[-1] = ended

    def _started(self, event: RolloutStarted) -> None:
        rollout = Rollout(
            rollout_id=event.rollout_id,
            head_release_id=event.head_release_id,
            candidate_release_id=event.candidate_release_id,
            policy=RolloutPolicy.of(event),
            started_at=event.occurred_at,
        )
        self.scenarios[event.scenario].rollouts.append(rollout)

    def _decided(self, event: RolloutDecided) -> None:
        view = self.scenarios[event.scenario]
        view.rollouts[-1] = replace(
            view.rollouts[-1],
            status=event.outcome,
            reason=event.reason,
            ended_at=event.occurred_at,
            figures_json=event.figures_json,
        )


def fold(events: Iterable[Event], book: RolloutBook | None = None) -> RolloutBook:
    """Apply ``events`` in order (to a new book unless one is given)."""
    book = book if book is not None else RolloutBook()
    for event in events:
        book.apply(event)
    return book


def validate(book: RolloutBook, event: RolloutStarted | RolloutDecided) -> str | None:
    """Why the fold would ignore ``event`` (a stable reason code), or None if it applies.

    The admin routes call it before appending; the fold calls it again on every event,
    so two writers racing past their checks still leave one outcome in the log's order.
    """
    view = book.scenarios.get(event.scenario)
    if view is not None and event.event_id in view.seen:
        return "duplicate_event"
    if view is None or view.head is None:
        return "unknown_scenario"
    if isinstance(event, RolloutDecided):
        return _decision_refusal(view, event)
    return _start_refusal(view, event)


def _start_refusal(view: ScenarioRollouts, event: RolloutStarted) -> str | None:
    if any(r.rollout_id == event.rollout_id for r in view.rollouts):
        return "duplicate_rollout"
    if RolloutPolicy.of(event).problem() is not None:
        return "invalid_policy"
    if view.active is not None:
        return "rollout_active"
    if view.promotion_pending is not None:
        return "promotion_pending"
    if event.head_release_id != view.head:
        return "stale_head"
    if event.candidate_release_id not in view.releases:
        return "unknown_candidate"
    if event.candidate_release_id not in view.held:
        return "not_pending"
    if "rolled_back" in view.marks(event.candidate_release_id):
        return "candidate_rolled_back"
    return None


def _decision_refusal(view: ScenarioRollouts, event: RolloutDecided) -> str | None:
    if event.outcome not in OUTCOMES:
        return "invalid_outcome"
    if event.reason not in REASONS:
        return "invalid_reason"
    active = view.active
    if active is None or active.rollout_id != event.rollout_id:
        known = any(r.rollout_id == event.rollout_id for r in view.rollouts)
        return "rollout_ended" if known else "unknown_rollout"
    return None
