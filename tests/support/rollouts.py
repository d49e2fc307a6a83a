"""Release-chain and rollout events for the rollout tests, deterministic in their args,
and a rollout workload for the processor hosts (:func:`rollout_plan`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from reef.core.events import (
    Event,
    ReleaseCommitted,
    ReleaseProposed,
    RolloutDecided,
    RolloutStarted,
    SampleJoined,
    ScenarioCreated,
    utc_now,
)
from reef.core.ids import EMPTY_CONTENT_ID, content_hash, derived_id, release_id
from reef.core.rollouts import RolloutBook, fold
from reef_dev.events import inference, receipt

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def committed(
    scenario: str,
    release: str,
    *,
    pending: bool = False,
    operation: str = "training",
    target: str | None = None,
    seconds: float = 0.0,
) -> ReleaseCommitted:
    """The chain's commit of ``release`` (``pending``: held, not the head)."""
    return ReleaseCommitted(
        event_id=f"committed-{scenario}-{release}",
        scenario=scenario,
        occurred_at=at(seconds),
        producer="reef-chain",
        release_id=release,
        proposal_id=f"proposal-{release}",
        content_id=f"content-{target or release}",
        operation=operation,
        target_release_id=target,
        pending=pending,
    )


def started(
    scenario: str,
    rollout: str,
    candidate: str,
    head: str,
    *,
    mode: str = "canary",
    share: float = 0.2,
    min_exchanges: int = 50,
    max_duration_s: float = 3600.0,
    alpha: float = 0.05,
    seconds: float = 0.0,
    latency_slo_ms: float | None = None,
) -> RolloutStarted:
    return RolloutStarted(
        event_id=f"started-{scenario}-{rollout}",
        scenario=scenario,
        occurred_at=at(seconds),
        producer="reef-admin",
        rollout_id=rollout,
        candidate_release_id=candidate,
        head_release_id=head,
        mode=mode,
        share=share,
        min_exchanges=min_exchanges,
        max_duration_s=max_duration_s,
        alpha=alpha,
        latency_slo_ms=latency_slo_ms,
    )


def decided(
    scenario: str,
    rollout: str,
    outcome: str = "promoted",
    reason: str = "statistic",
    *,
    seconds: float = 0.0,
) -> RolloutDecided:
    return RolloutDecided(
        event_id=f"decided-{scenario}-{rollout}-{outcome}-{reason}",
        scenario=scenario,
        occurred_at=at(seconds),
        producer="reef-rollouts",
        rollout_id=rollout,
        outcome=outcome,
        reason=reason,
    )


def rollout_book(
    scenario: str = "shop",
    *,
    rollout: str = "r1",
    mode: str = "canary",
    share: float = 0.2,
) -> RolloutBook:
    """A scenario with head ``h0``, held release ``c1`` and an active rollout of ``c1``."""
    return fold(
        [
            committed(scenario, "h0", operation="creation"),
            committed(scenario, "c1", pending=True, seconds=1),
            started(scenario, rollout, "c1", "h0", mode=mode, share=share, seconds=2),
        ]
    )


@dataclass
class RolloutPlan:
    """Scenarios whose chains hold a head and a pending candidate, a canary of each, and
    traffic in chunks in which the candidate always scores 1 and the head 0."""

    setup: list[Event]
    starts: list[RolloutStarted]
    chunks: list[list[Event]]

    def candidate(self, scenario: str) -> str:
        return next(s.candidate_release_id for s in self.starts if s.scenario == scenario)


def rollout_plan(scenarios: int, exchanges: int, chunk_size: int) -> RolloutPlan:
    """The chain commits the setup (creations and pending proposals); the starts name the
    releases it will commit (ids are hashes of their parents and content)."""
    setup: list[Event] = []
    starts: list[RolloutStarted] = []
    for n in range(scenarios):
        scenario = f"canary-{uuid.uuid4().hex[:8]}-{n}"
        head = release_id(scenario, None, EMPTY_CONTENT_ID, "creation")
        content = content_hash({"candidate": scenario})
        setup += [
            ScenarioCreated(
                event_id=derived_id("scenario", scenario),
                scenario=scenario,
                occurred_at=utc_now(),
                producer="test",
                recipe="core",
                initial_release_id=head,
            ),
            ReleaseProposed(
                event_id=f"proposal-{scenario}",
                scenario=scenario,
                occurred_at=utc_now(),
                producer="test",
                proposal_id=f"proposal-{scenario}",
                content_id=content,
                operation="training",
                parent_release_id=head,
                pending=True,
            ),
        ]
        candidate = release_id(scenario, head, content, "training")
        start = started(
            scenario, f"rollout-{scenario}", candidate, head, share=0.5, min_exchanges=5
        )
        starts.append(replace(start, occurred_at=utc_now()))
    traffic: list[Event] = []
    for i in range(exchanges):
        for s in starts:
            arm = s.candidate_release_id if i % 2 else s.head_release_id
            rec = receipt(s.scenario, i)
            traffic.append(inference(s.scenario, rec, utc_now(), release=arm))
            traffic.append(_sample(s.scenario, rec, arm, float(arm == s.candidate_release_id)))
    chunks = [traffic[i : i + chunk_size] for i in range(0, len(traffic), chunk_size)]
    return RolloutPlan(setup, starts, chunks)


def _sample(scenario: str, rec: str, release: str, score: float) -> SampleJoined:
    return SampleJoined(
        event_id=f"sample-{rec}",
        scenario=scenario,
        occurred_at=utc_now(),
        producer="test",
        report_id=f"report-{rec}",
        references=[rec],
        trajectory_json="[]",
        score=score,
        feedback_json="null",
        metadata_json="{}",
        release_ids=[release],
    )
