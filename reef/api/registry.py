"""Scenario binding: the first use of a name appends ScenarioCreated; the log decides races.

Two replicas may both append ScenarioCreated for a new name; both events carry the same
deterministic ids, and the projection keeps the first one in the log (all of a scenario's
events share one partition, so "first" is well defined). Each replica then waits until its
own append is applied, so it answers with the binding every replica agrees on.
"""

from __future__ import annotations

from reef.api.context import AppContext
from reef.core.errors import RequestError
from reef.core.events import ScenarioCreated, utc_now
from reef.core.ids import EMPTY_CONTENT_ID, derived_id, release_id
from reef.services.projection import ScenarioView


def find(ctx: AppContext, name: str) -> ScenarioView:
    view = ctx.projection.state.scenarios.get(name)
    if view is None:
        raise RequestError(404, "unknown_scenario", f"unknown scenario {name!r}")
    return view


async def ensure(ctx: AppContext, name: str, *, implicit: bool = True) -> tuple[ScenarioView, bool]:
    """The scenario's view, creating it if allowed; returns (view, created_now)."""
    view = ctx.projection.state.scenarios.get(name)
    if view is not None:
        return view, False
    if implicit and not ctx.settings.deployment.allow_implicit_scenarios:
        raise RequestError(404, "unknown_scenario", f"unknown scenario {name!r}")
    seed = ctx.seed_content_id
    event = ScenarioCreated(
        event_id=derived_id("scenario", name),
        scenario=name,
        occurred_at=utc_now(),
        producer=ctx.producer,
        recipe=ctx.settings.deployment.recipe,
        initial_release_id=release_id(name, None, seed or EMPTY_CONTENT_ID, "creation"),
        seed_content_id=seed,
    )
    position = await ctx.store.append(event)
    await ctx.projection.wait_for(position)
    return ctx.projection.state.scenarios[name], True
