"""Rollouts: a pending release serves a share of the traffic beside the head until live
outcomes, or an operator, promote it or roll it back.

A start appends ``RolloutStarted`` and a manual decision ``RolloutDecided`` (reason
``manual``) on ``reef.releases``; both are checked first with the fold's own
:func:`reef.core.rollouts.validate`, then the route waits until this replica's
projection has folded its append, so it answers with what the log decided (a start that
lost a race to another is 409). A promotion becomes the chain's ``promote`` of the
candidate, proposed by the rollout controller (:mod:`reef.core.rollout_control`) for a
manual decision and the controller's own alike; the promote route waits for the chain's
decision like ``POST /reef/scenarios/{s}/promote`` and answers the new head.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Final

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from reef.api import openapi, registry
from reef.api.context import AppContext, context_of
from reef.api.inputs import checked_scenario, parse_object, read_body
from reef.api.releases import chain_decision, find_release, require_restorable
from reef.core.errors import RequestError
from reef.core.events import RolloutDecided, RolloutStarted, utc_now
from reef.core.ids import derived_id
from reef.core.rollout_control import manual_decision_id, promotion_id
from reef.core.rollouts import Rollout, RolloutPolicy, ScenarioRollouts, validate

router = APIRouter()

#: the fold's refusals of a start or a decision: (status, what the client is told)
REFUSALS: Final[dict[str, tuple[int, str]]] = {
    "unknown_scenario": (404, "the scenario has no release chain yet"),
    "unknown_candidate": (404, "the candidate is not a release of the scenario"),
    "unknown_rollout": (404, "no such rollout in the scenario"),
    "invalid_policy": (400, "the rollout policy is invalid"),
    "not_pending": (409, "the candidate is not a pending (held) release"),
    "rollout_active": (409, "the scenario already has an active rollout"),
    "promotion_pending": (409, "a promoted rollout waits for the chain to commit it"),
    "stale_head": (409, "the head moved while the rollout was started"),
    "candidate_rolled_back": (409, "this candidate was rolled back before"),
    "duplicate_rollout": (409, "a rollout with this id exists"),
    "duplicate_event": (409, "this fact is in the log already"),
    "rollout_ended": (409, "the rollout has ended"),
}
DEFAULTS: Final[dict[str, Any]] = {
    "mode": "canary",
    "min_exchanges": 100,
    "max_duration_s": 86_400.0,
    "alpha": 0.05,
}


def rollout_json(rollout: Rollout) -> dict[str, Any]:
    policy = rollout.policy
    return {
        "rollout_id": rollout.rollout_id,
        "candidate_release_id": rollout.candidate_release_id,
        "head_release_id": rollout.head_release_id,
        "mode": policy.mode,
        "share": policy.share,
        "min_exchanges": policy.min_exchanges,
        "max_duration_s": policy.max_duration_s,
        "alpha": policy.alpha,
        "latency_slo_ms": policy.latency_slo_ms,
        "status": rollout.status,
        "reason": rollout.reason,
        "started_at": rollout.started_at.isoformat(),
        "ended_at": None if rollout.ended_at is None else rollout.ended_at.isoformat(),
        "figures": json.loads(rollout.figures_json),
    }


def _refused(reason: str, detail: str | None = None) -> RequestError:
    status, message = REFUSALS.get(reason, (409, reason.replace("_", " ")))
    code = "unknown_release" if reason == "unknown_candidate" else reason
    return RequestError(status, code, f"{message}: {detail}" if detail else message)


def _view(ctx: AppContext, scenario: str) -> ScenarioRollouts:
    registry.find(ctx, scenario)  # 404 for a scenario this replica does not know
    view = ctx.projection.state.rollouts.scenario(scenario)
    if view is None or view.head is None:
        raise _refused("unknown_scenario")
    return view


def _find(ctx: AppContext, scenario: str, rollout_id: str) -> Rollout:
    registry.find(ctx, scenario)
    view = ctx.projection.state.rollouts.scenario(scenario)
    for rollout in [] if view is None else view.rollouts:
        if rollout.rollout_id == rollout_id:
            return rollout
    raise _refused("unknown_rollout", rollout_id)


@router.get("/reef/scenarios/{scenario}/rollouts", responses=openapi.errors(400, 401, 403, 404))
async def list_rollouts(scenario: str, request: Request) -> JSONResponse:
    """The scenario's rollouts, newest first.

    curl -H "Authorization: Bearer $REEF_TOKEN" \\
      http://127.0.0.1:8900/reef/scenarios/demo/rollouts
    """
    ctx = context_of(request)
    ctx.authenticate(request, "read").require_scenario(checked_scenario(scenario))
    registry.find(ctx, scenario)
    view = ctx.projection.state.rollouts.scenario(scenario)
    rollouts = [] if view is None else [rollout_json(r) for r in reversed(view.rollouts)]
    return JSONResponse({"scenario": scenario, "rollouts": rollouts})


@router.post(
    "/reef/scenarios/{scenario}/rollouts",
    responses={
        201: {"description": "Started"},
        **openapi.errors(400, 401, 403, 404, 409, 413, 503),
    },
    openapi_extra=openapi.declare(body=openapi.ROLLOUT_BODY),
)
async def start_rollout(scenario: str, request: Request) -> JSONResponse:
    """Serve a pending release beside the head: to a share of the sessions (``canary``),
    or answering copies of a share of them, never returned (``shadow``).

    curl -H "Authorization: Bearer $REEF_ADMIN_TOKEN" \\
      -d '{"release_id": "<pending id>", "share": 0.2, "min_exchanges": 100}' \\
      http://127.0.0.1:8900/reef/scenarios/demo/rollouts
    """
    ctx = context_of(request)
    principal = ctx.authenticate(request, "admin")
    principal.require_scenario(checked_scenario(scenario))
    if not ctx.settings.deployment.rollouts:
        raise RequestError(
            409, "rollouts_disabled", "this deployment runs no rollout controller (REEF_ROLLOUTS)"
        )
    body = parse_object(await read_body(request, ctx.settings.api.max_body_bytes))
    candidate, policy = _start_input(body)
    view = _view(ctx, scenario)
    scenario_view = registry.find(ctx, scenario)
    rollout_id = uuid.uuid4().hex
    event = RolloutStarted(
        event_id=derived_id("rollout-started", scenario, rollout_id),
        scenario=scenario,
        occurred_at=utc_now(),
        producer=ctx.producer,
        rollout_id=rollout_id,
        candidate_release_id=candidate,
        head_release_id=view.head or "",
        mode=policy.mode,
        share=policy.share,
        min_exchanges=policy.min_exchanges,
        max_duration_s=policy.max_duration_s,
        alpha=policy.alpha,
        requested_by=principal.name,
        latency_slo_ms=policy.latency_slo_ms,
    )
    refused = validate(ctx.projection.state.rollouts, event)
    if refused is not None:
        raise _refused(refused, policy.problem())
    await require_restorable(ctx, find_release(scenario_view, candidate))
    await ctx.projection.wait_for(await ctx.store.append(event))
    started = next((r for r in _view(ctx, scenario).rollouts if r.rollout_id == rollout_id), None)
    if started is None or not started.active:
        raise RequestError(409, "rollout_refused", "another start or a new head came first")
    return JSONResponse(rollout_json(started), status_code=201)


def _start_input(body: dict[str, Any]) -> tuple[str, RolloutPolicy]:
    """The candidate and the policy a start asks for (400 for a wrong type)."""
    candidate = body.get("release_id")
    if not isinstance(candidate, str) or not candidate:
        raise RequestError(400, "invalid_release_id", "release_id must be a non-empty string")
    values = {**DEFAULTS, **{k: body[k] for k in ("share", *DEFAULTS) if k in body}}
    if not isinstance(values["mode"], str):
        raise RequestError(400, "invalid_mode", "mode must be a string")
    for name in ("share", "max_duration_s", "alpha"):
        value = values.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RequestError(400, f"invalid_{name}", f"{name} must be a number")
    if isinstance(values["min_exchanges"], bool) or not isinstance(values["min_exchanges"], int):
        raise RequestError(400, "invalid_min_exchanges", "min_exchanges must be an integer")
    slo = body.get("latency_slo_ms")
    if slo is not None and (isinstance(slo, bool) or not isinstance(slo, int | float)):
        raise RequestError(400, "invalid_latency_slo_ms", "latency_slo_ms must be a number")
    policy = RolloutPolicy(
        mode=values["mode"],
        share=float(values["share"]),
        min_exchanges=values["min_exchanges"],
        max_duration_s=float(values["max_duration_s"]),
        alpha=float(values["alpha"]),
        latency_slo_ms=None if slo is None else float(slo),
    )
    problem = policy.problem()
    if problem is not None:
        raise RequestError(400, "invalid_policy", problem)
    return candidate, policy


@router.post(
    "/reef/scenarios/{scenario}/rollouts/{rollout_id}/promote",
    responses=openapi.errors(400, 401, 403, 404, 409, 503),
)
async def promote_rollout(scenario: str, rollout_id: str, request: Request) -> JSONResponse:
    """End a rollout now: its candidate becomes the head (the chain's promote).

    curl -X POST -H "Authorization: Bearer $REEF_ADMIN_TOKEN" \\
      http://127.0.0.1:8900/reef/scenarios/demo/rollouts/<rollout id>/promote
    """
    ctx, rollout = await _decide(request, scenario, rollout_id, "promoted")
    release = await chain_decision(ctx, scenario, promotion_id(scenario, rollout_id), "promote")
    return JSONResponse(
        {"scenario": scenario, "rollout": rollout_json(rollout), "release": release}
    )


@router.post(
    "/reef/scenarios/{scenario}/rollouts/{rollout_id}/rollback",
    responses=openapi.errors(400, 401, 403, 404, 409, 503),
)
async def roll_back_rollout(scenario: str, rollout_id: str, request: Request) -> JSONResponse:
    """End a rollout now: all traffic returns to the head; the candidate stays, marked.

    curl -X POST -H "Authorization: Bearer $REEF_ADMIN_TOKEN" \\
      http://127.0.0.1:8900/reef/scenarios/demo/rollouts/<rollout id>/rollback
    """
    _, rollout = await _decide(request, scenario, rollout_id, "rolled_back")
    return JSONResponse({"scenario": scenario, "rollout": rollout_json(rollout)})


async def _decide(
    request: Request, scenario: str, rollout_id: str, outcome: str
) -> tuple[AppContext, Rollout]:
    """Append an operator's decision and answer with the rollout as the log decided it.

    A retried request appends the same fact (its id is derived), so a rollout this
    operator already ended the same way answers as if decided now.
    """
    ctx = context_of(request)
    principal = ctx.authenticate(request, "admin")
    principal.require_scenario(checked_scenario(scenario))
    rollout = _find(ctx, scenario, rollout_id)
    if _decided_so(rollout, outcome):
        return ctx, rollout
    event = RolloutDecided(
        event_id=manual_decision_id(scenario, rollout_id, outcome),
        scenario=scenario,
        occurred_at=utc_now(),
        producer=ctx.producer,
        rollout_id=rollout_id,
        outcome=outcome,
        reason="manual",
        requested_by=principal.name,
    )
    refused = validate(ctx.projection.state.rollouts, event)
    if refused is not None:
        raise _refused(refused, f"{rollout.status} ({rollout.reason})")
    await ctx.projection.wait_for(await ctx.store.append(event))
    rollout = _find(ctx, scenario, rollout_id)
    if not _decided_so(rollout, outcome):  # a decision already in the log came first
        raise _refused("rollout_ended", f"{rollout.status} ({rollout.reason})")
    return ctx, rollout


def _decided_so(rollout: Rollout, outcome: str) -> bool:
    return rollout.status == outcome and rollout.reason == "manual"
