"""Release-chain and rollout events for the rollout tests, deterministic in their args."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reef.core.events import ReleaseCommitted, RolloutDecided, RolloutStarted
from reef.core.rollouts import RolloutBook, fold

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
