"""The rollout deadline watcher: a task of the API's lifespan (``REEF_ROLLOUTS``).

Every :data:`CHECK_INTERVAL_S` it appends the deadline decisions
:func:`reef.core.rollout_deadlines.overdue_decisions` finds in the API's own projection
of ``reef.releases``, with the controller's live figures of the rollout when its host
holds them. A failed check (the log unavailable, or a defect: anything but
cancellation) is logged and retried at the next tick, so deadlines are never silently
left unenforced; the projection shows the decision once it is in the log, so a decision is not
appended twice by one process, and replicas racing append the same fact.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from reef.api.context import AppContext
from reef.core.errors import ReefError
from reef.core.events import utc_now
from reef.core.rollout_control import live_figures
from reef.core.rollout_deadlines import overdue_decisions

logger = logging.getLogger("reef.rollouts")

CHECK_INTERVAL_S: Final = 1.0


async def watch_rollout_deadlines(ctx: AppContext, interval_s: float = CHECK_INTERVAL_S) -> None:
    """Run until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await append_overdue(ctx)
        except ReefError as exc:
            logger.warning("rollout deadline check failed (retried): %s", exc)
        except Exception:  # a defect must not end deadline enforcement for good
            logger.exception("rollout deadline check failed unexpectedly (retried)")


async def append_overdue(ctx: AppContext) -> int:
    """Append the decisions due now; how many were appended."""
    now = utc_now()
    figures: dict[str, dict[str, Any]] = {}
    for values in ctx.processors.live_rollouts.values():
        shown = live_figures(values, now)
        figures[shown.pop("rollout_id")] = shown
    appended = 0
    for event in overdue_decisions(ctx.projection.state.rollouts, now, ctx.producer, figures):
        await ctx.projection.wait_for(await ctx.store.append(event))
        logger.info(
            "rollout %s of %s rolled back: max_duration passed", event.rollout_id, event.scenario
        )
        appended += 1
    return appended
