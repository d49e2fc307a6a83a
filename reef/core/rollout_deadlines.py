"""Rollout deadlines on the wall clock: a rollout with no traffic still ends.

The controller (:mod:`reef.core.rollout_control`) decides ``max_duration`` in event time,
after an exchange or a sample of the scenario, so a scenario that went quiet would keep
its candidate in the rollout until its next exchange. :func:`overdue_decisions` gives, for
every live rollout whose ``started_at + max_duration_s`` is past ``now``, the decision the
controller would append: ``rolled_back`` with reason ``max_duration``, under the
controller's own id for the rollout (:func:`reef.core.rollout_control.decision_id`). So
whichever reaches the log first stands, and the fold ignores the other (one decision per
rollout, whoever writes it, and replicas racing append the same fact). Pure: the caller
brings the clock and appends (:mod:`reef.api.rollout_deadlines`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from reef.core.events import RolloutDecided
from reef.core.rollout_control import decision_id
from reef.core.rollouts import RolloutBook, validate


def overdue_decisions(
    book: RolloutBook,
    now: datetime,
    producer: str,
    figures: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[RolloutDecided]:
    """The deadline decisions due at ``now`` that the fold would apply; ``figures``: the
    live comparison per rollout id, if known, kept in the decision."""
    due: list[RolloutDecided] = []
    for scenario, view in sorted(book.scenarios.items()):
        rollout = view.active
        if rollout is None:
            continue
        elapsed = (now - rollout.started_at).total_seconds()
        if elapsed < rollout.policy.max_duration_s:
            continue
        shown = {**(figures or {}).get(rollout.rollout_id, {}), "elapsed_s": round(elapsed, 3)}
        event = RolloutDecided(
            event_id=decision_id(scenario, rollout.rollout_id),
            scenario=scenario,
            occurred_at=now,
            producer=producer,
            rollout_id=rollout.rollout_id,
            outcome="rolled_back",
            reason="max_duration",
            figures_json=json.dumps(shown, sort_keys=True),
        )
        if validate(book, event) is None:
            due.append(event)
    return due
