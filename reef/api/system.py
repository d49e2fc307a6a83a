"""Health and status."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from reef import __version__
from reef.api import openapi
from reef.api.context import AppContext, context_of
from reef.api.rollouts import rollout_json
from reef.core.events import utc_now
from reef.core.rollout_control import live_figures
from reef.services.projection import TurnFigures

router = APIRouter()


@router.get("/healthz")
async def healthz() -> JSONResponse:
    """Liveness, no authentication.

    curl http://127.0.0.1:8900/healthz
    """
    return JSONResponse({"ok": True})


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text exposition (read scope, a token not bound to scenarios: the
    figures span every scenario).

    curl -H "Authorization: Bearer $REEF_TOKEN" http://127.0.0.1:8900/metrics
    """
    context_of(request).authenticate(request, "read").require_unrestricted()
    exposition: Response = request.app.state.metrics.exposition()
    return exposition


@router.get("/reef/status", responses=openapi.errors(401, 403, 503))
async def status(request: Request) -> JSONResponse:
    """Per-scenario heads, engines, the latest rollout (live figures per arm while active),
    (sessions tracked) turn and judgement figures and (a price table set) tokens and cost
    in total and per release, processor lag, samples pending, the in-process trainer and
    judge, this replica's state.

    A token bound to scenarios sees only those scenarios, and none of the figures that
    span the whole deployment (processors, samples pending, trainer, judge, projection
    digest).

    curl -H "Authorization: Bearer $REEF_TOKEN" http://127.0.0.1:8900/reef/status
    """
    ctx = context_of(request)
    principal = ctx.authenticate(request, "read")
    state = ctx.projection.state
    scenarios = {
        name: {
            "recipe": view.recipe,
            "head_release_id": view.head,
            "releases": len(view.releases),
            "engines": {
                engine: {"release_id": release, "weight_version": version}
                for (scenario, engine), (release, version) in sorted(state.engines.items())
                if scenario == name
            },
            **_turns(ctx, name),
            **_rollout(ctx, name),
            **_spend(ctx, name),
        }
        for name, view in sorted(state.scenarios.items())
        if principal.may_use(name)
    }
    if not principal.unrestricted:
        return JSONResponse(
            {
                "version": __version__,
                "producer": ctx.producer,
                "log": ctx.settings.deployment.log,
                "projection": {"healthy": ctx.projection.healthy()},
                "scenarios": scenarios,
            }
        )
    return JSONResponse(
        {
            "version": __version__,
            "producer": ctx.producer,
            "log": ctx.settings.deployment.log,
            "projection": {"healthy": ctx.projection.healthy(), "digest": state.digest()},
            "processors": await _processors(ctx),
            "samples_pending": state.samples_pending(),
            **({"trainer": ctx.trainer.status()} if ctx.trainer is not None else {}),
            **({"judge": ctx.judge.status()} if ctx.judge is not None else {}),
            "scenarios": scenarios,
        }
    )


def _rollout(ctx: AppContext, scenario: str) -> dict[str, Any]:
    """The scenario's latest rollout, if it had any: the policy and status, and while it
    is active the controller's live figures (per arm exchanges, errors and mean score,
    and the statistic); once decided, the figures it was decided on."""
    view = ctx.projection.state.rollouts.scenario(scenario)
    current = None if view is None else view.current
    if current is None:
        return {}
    body = rollout_json(current)
    live = ctx.processors.live_rollouts.get(scenario)
    if current.active and live is not None and live["rollout_id"] == current.rollout_id:
        body["figures"] = live_figures(live, utc_now())
    return {"rollout": body}


def _spend(ctx: AppContext, scenario: str) -> dict[str, Any]:
    """A scenario's exchanges, tokens by rate and cost, in total and per release that
    served them, while a price table is set (docs/cost.md)."""
    if not ctx.settings.recording.prices:
        return {}
    ledger = ctx.projection.state.spend
    releases = {r: spend.as_json() for r, spend in ledger.by_release(scenario).items()}
    return {"spend": {**ledger.scenario(scenario).as_json(), "releases": releases}}


def _turns(ctx: AppContext, scenario: str) -> dict[str, Any]:
    """A scenario's completed turns, expired sessions and judgements, while sessions are
    tracked (or the log holds some)."""
    figures = ctx.projection.state.turns.get(scenario)
    if figures is None:
        if not ctx.settings.sessions.track:
            return {}
        figures = TurnFigures()
    return {"turns": figures.as_json()}


async def _processors(ctx: AppContext) -> dict[str, Any]:
    """Each processor's lag, from the committed offsets of the group that hosts it."""
    lag = await ctx.processors.read_lag()
    # the group's name on the cluster: the log namespaces groups with the topic prefix
    prefix = ctx.settings.kafka.topic_prefix if ctx.settings.deployment.log == "kafka" else ""
    return {
        name: {"host": prefix + ctx.processors.group(name), "lag": topics}
        for name, topics in lag.items()
    }
