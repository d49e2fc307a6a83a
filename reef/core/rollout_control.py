"""The rollout controller: live outcomes decide a rollout, exactly once.

Inputs ``reef.inference`` (which arm served each exchange, and whether it failed),
``reef.samples`` (report scores, the judge's computed reports included, with the
releases that served them) and ``reef.releases`` (the chain and the rollouts). Outputs
``RolloutDecided`` on ``reef.releases`` and the chain's ``promote`` proposal on
``reef.release-proposals`` (each output goes to its event type's topic). Rules, per
scenario, in log order:

1. An event of ``reef.releases`` is folded into the scenario's rollout state by the
   fold the API uses (:class:`reef.core.rollouts.RolloutBook`): a start or decision the
   fold refuses changes nothing here either. A start the fold applies opens the
   rollout's live comparison; the end of the active rollout (decided, or superseded by
   a new head) closes it.
2. A decision the fold applies with outcome ``promoted`` (the controller's own or a
   manual one from the admin API) becomes the chain's ``promote`` of the candidate: a
   ``ReleaseProposed`` naming the rollout's head as parent and the candidate's content,
   its id derived from the rollout (:func:`promotion_id`). The chain decides it like any
   proposal (compare-and-swap; a proposal id it has decided is never decided again).
3. While a rollout is live, an exchange served by the head or the candidate (the release
   that really served it: ``served_release_id``, else the routed ``release_id``) adds
   its error flag (incomplete, or a status of 400 or more) and, with a latency
   objective, its slow flag (``latency_ms`` above ``latency_slo_ms``) to that arm; an exchange of
   any other release (a pinned one) is not counted. In a shadow rollout the head's arm
   counts the exchanges clients were answered with and the candidate's its shadow
   copies (:mod:`reef.core.shadow`: their release is the candidate, and a copy the
   candidate failed to answer is recorded incomplete, so it counts as an error); a copy
   an engine reports it answered with other weights than the candidate's (its
   ``served_release_id``: the engine held no candidate slot) tried nothing and is not
   counted.
   Exchanges outside the shadow share count for the head too: the decision rule of a
   shadow policy groups ``1 / share`` head outcomes per candidate outcome.
4. A sample whose releases are all one arm's adds its score to that arm, read on
   [0, 1]: below 0 counts as 0, above 1 as 1 (a judged turn's -1 is a 0, its +1 a 1).
   A sample spanning both arms, or naming another release, is not counted. A sample of
   a shadow copy scores the candidate like any other (it never trains: that rule is
   the trainer's, :func:`reef.core.shadow.trains`).
5. After every exchange and sample of the scenario the live decision
   (:class:`reef.core.live_decision.LiveComparison`) is asked, with the event time
   elapsed since the start. A verdict appends one ``RolloutDecided`` (reason
   ``statistic``, ``errors``, ``latency`` or ``max_duration``, the figures as JSON) whose id derives
   from the rollout alone (:func:`decision_id`); the comparison then takes no more
   outcomes, and the rollout closes when the fold applies a decision (rule 1).

Exactly once: the decision's id is a function of the rollout, and the state records that
it was made in the same commit as the output, so a redelivered input, a host restarted
after a crash, or a replay makes the same decision with the same id or none. The fold
applies the first decision of a rollout in the log (a manual one racing the controller's
wins if it is first, and the later one is ignored), and rule 2 follows the fold, never
the controller's own output, so a candidate is proposed for promotion only when the log
says it was promoted. Both hosts apply each input record once (state and input positions
commit together), so exchanges are not remembered by receipt: the state is bounded by the
rollout's figures, not by its traffic. Event time measures the deadline, so a scenario
with no traffic is decided by its next exchange or sample.

State: ``book/<scenario>`` (the scenario's rollout fold), ``content/<scenario>/<release>``
(a held release's content, for its promote) and ``live/<scenario>`` (the live rollout:
policy, start and comparison; present only while a rollout is live). No clock, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Final

from reef.core import topics
from reef.core.events import (
    Event,
    InferenceRecorded,
    ReleaseCommitted,
    ReleaseProposed,
    RolloutDecided,
    RolloutStarted,
    SampleJoined,
)
from reef.core.ids import derived_id
from reef.core.live_decision import Arm, LiveComparison, LiveDecision
from reef.core.rollouts import Rollout, RolloutBook, RolloutPolicy, ScenarioRollouts
from reef.core.state import KeyValueState, ReadableState

PRODUCER: Final = "reef-rollouts"
#: state keys of the live rollouts: ``live/<scenario>``
LIVE_PREFIX: Final = "live/"
#: the outcome a verdict of the live decision appends
OUTCOME: Final = {"promote": "promoted", "roll_back": "rolled_back"}


def decision_id(scenario: str, rollout_id: str) -> str:
    """The id of the controller's decision of a rollout: one per rollout."""
    return derived_id("rollout-decided", scenario, rollout_id)


def manual_decision_id(scenario: str, rollout_id: str, outcome: str) -> str:
    """The id of an operator's decision (a retried request appends the same fact)."""
    return derived_id("rollout-decided-manual", scenario, rollout_id, outcome)


def promotion_id(scenario: str, rollout_id: str) -> str:
    """The proposal (and event) id of the chain's promote of a promoted rollout."""
    return derived_id("rollout-promote", scenario, rollout_id)


def score_outcome(score: float) -> float:
    """A report's score as a live outcome in [0, 1] (rule 4)."""
    return min(1.0, max(0.0, score))


@dataclass(slots=True)
class LiveRollout:
    """The state of one live rollout (``live/<scenario>``)."""

    rollout_id: str
    head: str
    candidate: str
    policy: RolloutPolicy
    started_at: datetime
    comparison: LiveComparison
    #: the outcome this controller appended, once it has
    decided: str | None = None

    @classmethod
    def opened(cls, rollout: Rollout) -> LiveRollout:
        return cls(
            rollout.rollout_id,
            rollout.head_release_id,
            rollout.candidate_release_id,
            rollout.policy,
            rollout.started_at,
            LiveComparison(rollout.policy.decision_rule()),
        )

    @classmethod
    def restored(cls, values: dict[str, Any]) -> LiveRollout:
        policy = RolloutPolicy(**values["policy"])
        return cls(
            values["rollout_id"],
            values["head"],
            values["candidate"],
            policy,
            datetime.fromisoformat(values["started_at"]),
            LiveComparison.restored(policy.decision_rule(), values["comparison"]),
            values["decided"],
        )

    def snapshot(self) -> dict[str, Any]:
        return {
            "rollout_id": self.rollout_id,
            "head": self.head,
            "candidate": self.candidate,
            "policy": asdict(self.policy),
            "started_at": self.started_at.isoformat(),
            "comparison": self.comparison.snapshot(),
            "decided": self.decided,
        }

    def arm_of(self, release_id: str) -> Arm | None:
        if release_id == self.candidate:
            return "candidate"
        return "head" if release_id == self.head else None

    def decide(self, now: datetime) -> LiveDecision:
        return self.comparison.decide((now - self.started_at).total_seconds())

    def figures(self, decision: LiveDecision) -> dict[str, Any]:
        return {**self.comparison.figures(decision), "verdict": decision.verdict}


def live_rollout(state: ReadableState, scenario: str) -> LiveRollout | None:
    """The scenario's live rollout as the controller holds it."""
    values = state.get(f"{LIVE_PREFIX}{scenario}")
    return None if values is None else LiveRollout.restored(values)


def live_figures(values: dict[str, Any], now: datetime) -> dict[str, Any]:
    """What status and metrics show of a live rollout (a ``live/<scenario>`` value): per
    arm exchanges, errors and mean score, and the statistic as of ``now``."""
    live = LiveRollout.restored(values)
    return {"rollout_id": live.rollout_id, **live.figures(live.decide(now))}


class RolloutController:
    """The pure step of the controller (see the module docstring)."""

    name = "rollouts"
    inputs = (topics.INFERENCE, topics.SAMPLES, topics.RELEASES)
    output = topics.RELEASES

    def reads(self, event: Event) -> Iterable[str]:
        if isinstance(event, InferenceRecorded | SampleJoined):
            return (f"live/{event.scenario}",)
        return (f"book/{event.scenario}", f"live/{event.scenario}")

    def step(self, state: KeyValueState, event: Event) -> list[Event]:
        if isinstance(event, ReleaseCommitted | RolloutStarted | RolloutDecided):
            return self._folded(state, event)
        if isinstance(event, InferenceRecorded):
            release = event.served_release_id or event.release_id
            if event.shadow_of is not None and release != event.release_id:
                return []  # rule 3: the engine answered the copy with other weights
            failed = not event.complete or event.status >= 400
            return self._outcome(state, event, [release], error=failed, latency_ms=event.latency_ms)
        if isinstance(event, SampleJoined):
            return self._outcome(state, event, event.release_ids, score=event.score)
        return []

    def _folded(
        self, state: KeyValueState, event: ReleaseCommitted | RolloutStarted | RolloutDecided
    ) -> list[Event]:
        """Rules 1 and 2."""
        scenario = event.scenario
        values = state.get(f"book/{scenario}")
        view = ScenarioRollouts() if values is None else ScenarioRollouts.restored(values)
        before = view.active
        RolloutBook({scenario: view}).apply(event)
        state.set(f"book/{scenario}", view.snapshot())
        if isinstance(event, ReleaseCommitted) and event.pending:
            state.set(f"content/{scenario}/{event.release_id}", event.content_id)
        after = view.active
        outputs: list[Event] = []
        if before is not None and (after is None or after.rollout_id != before.rollout_id):
            state.delete(f"live/{scenario}")
            ended = next(r for r in view.rollouts if r.rollout_id == before.rollout_id)
            if ended.status == "promoted" and isinstance(event, RolloutDecided):
                outputs.extend(self._promotion(state, ended, event))
        if after is not None and (before is None or before.rollout_id != after.rollout_id):
            state.set(f"live/{scenario}", LiveRollout.opened(after).snapshot())
        return outputs

    def _promotion(
        self, state: KeyValueState, rollout: Rollout, decided: RolloutDecided
    ) -> list[Event]:
        content = state.get(f"content/{decided.scenario}/{rollout.candidate_release_id}")
        if content is None:  # a start the fold applied names a held release: never here
            return []
        proposal = promotion_id(decided.scenario, rollout.rollout_id)
        metrics = {
            "rollout_id": rollout.rollout_id,
            "rollout_reason": decided.reason,
            "rollout_figures": json.loads(decided.figures_json),
        }
        return [
            ReleaseProposed(
                event_id=proposal,
                scenario=decided.scenario,
                occurred_at=decided.occurred_at,
                producer=PRODUCER,
                proposal_id=proposal,
                content_id=content,
                operation="promote",
                parent_release_id=rollout.head_release_id,
                target_release_id=rollout.candidate_release_id,
                metrics_json=json.dumps(metrics, sort_keys=True),
            )
        ]

    def _outcome(
        self,
        state: KeyValueState,
        event: Event,
        releases: list[str],
        *,
        error: bool | None = None,
        latency_ms: float | None = None,
        score: float | None = None,
    ) -> list[Event]:
        """Rules 3 to 5."""
        live = live_rollout(state, event.scenario)
        if live is None or live.decided is not None:
            return []
        arms = {live.arm_of(release) for release in releases}
        arm = arms.pop() if len(arms) == 1 else None
        if arm is not None and error is not None:
            live.comparison.record_exchange(arm, error=error, latency_ms=latency_ms)
        elif arm is not None and score is not None:
            live.comparison.record_score(arm, score_outcome(score))
        decision = live.decide(event.occurred_at)
        outputs: list[Event] = []
        if decision.verdict != "continue":
            live.decided = OUTCOME[decision.verdict]
            outputs.append(_decided(event, live, decision, live.decided))
        elif arm is None:
            return []  # nothing recorded, nothing decided: the state is unchanged
        state.set(f"live/{event.scenario}", live.snapshot())
        return outputs


def _decided(
    event: Event, live: LiveRollout, decision: LiveDecision, outcome: str
) -> RolloutDecided:
    return RolloutDecided(
        event_id=decision_id(event.scenario, live.rollout_id),
        scenario=event.scenario,
        occurred_at=event.occurred_at,
        producer=PRODUCER,
        rollout_id=live.rollout_id,
        outcome=outcome,
        reason=decision.reason or "statistic",
        figures_json=json.dumps(live.figures(decision), sort_keys=True),
    )
