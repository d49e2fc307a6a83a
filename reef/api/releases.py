"""Rollback, promote, and the Git LFS endpoint (the harness routes: reef.api.harness).

Rollback and promote are proposals to the release chain: the API names the current head
as parent and the target's content, appends ReleaseProposed and waits for the chain's
decision (the new head, or 409 with the chain's reason). History is never rewritten.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from reef.api import openapi, registry
from reef.api.context import AppContext, context_of
from reef.api.inputs import checked_scenario, parse_object, read_body
from reef.artifacts import ArtifactError, missing_objects
from reef.artifacts.lfs import LFS_MEDIA_TYPE, href_for_store, lfs_batch_response
from reef.core.errors import RequestError
from reef.core.events import ReleaseProposed, utc_now
from reef.services.projection import ReleaseView, ScenarioView

router = APIRouter()

DECISION_SECONDS = 30.0
RELEASE_HEADER = "x-reef-release-id"


def find_release(view: ScenarioView, release_id: str) -> ReleaseView:
    for release in view.releases:
        if release.release_id == release_id:
            return release
    raise RequestError(404, "unknown_release", f"no release {release_id!r} in {view.name!r}")


@router.post(
    "/reef/scenarios/{scenario}/rollback",
    responses=openapi.errors(400, 401, 403, 404, 409, 413, 503),
    openapi_extra=openapi.declare(body=openapi.RELEASE_BODY),
)
async def rollback(scenario: str, request: Request) -> JSONResponse:
    """Serve an earlier release's content again, as a new release on top of the head.

    curl -H "Authorization: Bearer $REEF_ADMIN_TOKEN" -d '{"release_id": "<id>"}' \\
      http://127.0.0.1:8900/reef/scenarios/demo/rollback
    """
    return await _republish(request, scenario, "rollback")


@router.post(
    "/reef/scenarios/{scenario}/promote",
    responses=openapi.errors(400, 401, 403, 404, 409, 413, 503),
    openapi_extra=openapi.declare(body=openapi.RELEASE_BODY),
)
async def promote(scenario: str, request: Request) -> JSONResponse:
    """Serve a pending (review-held) release, as a new release on top of the head.

    curl -H "Authorization: Bearer $REEF_ADMIN_TOKEN" -d '{"release_id": "<id>"}' \\
      http://127.0.0.1:8900/reef/scenarios/demo/promote
    """
    return await _republish(request, scenario, "promote")


async def _republish(request: Request, scenario: str, operation: str) -> JSONResponse:
    ctx = context_of(request)
    ctx.authenticate(request, "admin").require_scenario(checked_scenario(scenario))
    body = parse_object(await read_body(request, ctx.settings.api.max_body_bytes))
    wanted = body.get("release_id")
    if not isinstance(wanted, str) or not wanted:
        raise RequestError(400, "invalid_release_id", "release_id must be a non-empty string")
    view = registry.find(ctx, scenario)
    target = find_release(view, wanted)
    if operation == "promote" and not target.pending:
        raise RequestError(409, "not_pending", f"release {wanted!r} is not pending")
    if operation == "rollback" and target.pending:
        raise RequestError(409, "pending_release", "a pending release is served by promote")
    await require_restorable(ctx, target)
    proposal_id = uuid.uuid4().hex
    await ctx.store.append(
        ReleaseProposed(
            event_id=proposal_id,
            scenario=scenario,
            occurred_at=utc_now(),
            producer=ctx.producer,
            proposal_id=proposal_id,
            parent_release_id=view.head,
            content_id=target.content_id,
            operation=operation,
            target_release_id=target.release_id,
        )
    )
    release = await chain_decision(ctx, scenario, proposal_id, operation)
    return JSONResponse({"scenario": scenario, **release})


async def chain_decision(
    ctx: AppContext, scenario: str, proposal_id: str, operation: str
) -> dict[str, Any]:
    """The release the chain committed for a proposal (the new head), once it decides:
    409 with the chain's reason if it rejected it, 503 if it has not decided in time."""
    decided = await ctx.projection.wait_until(
        lambda state: proposal_id in state.decisions, DECISION_SECONDS
    )
    if not decided:
        raise RequestError(
            503,
            "release_chain_unavailable",
            "the release chain has not decided yet; the proposal stands",
        )
    outcome, detail = ctx.projection.state.decisions[proposal_id]
    if outcome == "rejected":
        raise RequestError(409, detail, f"the release chain rejected the {operation}: {detail}")
    return find_release(ctx.projection.state.scenarios[scenario], detail).as_json(detail)


async def require_restorable(ctx: AppContext, release: ReleaseView) -> None:
    """409 unless every artifact object of the release's content is in the store."""

    def check() -> list[str]:
        return missing_objects(ctx.content.store, ctx.content.load(release.content_id))

    try:
        missing = await asyncio.to_thread(check)
    except ArtifactError as exc:
        raise RequestError(409, "not_restorable", f"release content unavailable: {exc}") from exc
    if missing:
        raise RequestError(409, "not_restorable", f"{len(missing)} artifact object(s) missing")


# -- Git LFS (download only) ---------------------------------------------------------------


def _scenario_oids(ctx: AppContext, view: ScenarioView) -> set[str]:
    oids: set[str] = set()
    for content_id in {r.content_id for r in view.releases}:
        oids.update(entry.oid for entry in ctx.content.load(content_id).values())
    return oids


@router.post(
    "/reef/lfs/{scenario}/objects/batch",
    responses=openapi.lfs_errors(400, 401, 403, 404, 409, 413, 422, 503),
    openapi_extra=openapi.declare(body=openapi.LFS_BATCH_BODY),
)
async def lfs_batch(scenario: str, request: Request) -> JSONResponse:
    """Git LFS batch API (basic transfer, download only) for a scenario's release files."""
    ctx = context_of(request)
    ctx.authenticate(request, "read").require_scenario(checked_scenario(scenario))
    view = registry.find(ctx, scenario)
    try:  # one JSON reading for every route (UTF-8, depth, finite numbers)
        batch = parse_object(await read_body(request, ctx.settings.api.max_body_bytes))
    except RequestError as exc:
        if exc.status != 400:
            raise
        return JSONResponse({"message": exc.message}, status_code=422, media_type=LFS_MEDIA_TYPE)
    base = f"{str(request.base_url).rstrip('/')}/reef/lfs/{scenario}/objects"
    href = href_for_store(ctx.content.store, base)

    def answer() -> dict[str, Any]:
        allowed = _scenario_oids(ctx, view)
        response = lfs_batch_response(ctx.content.store, batch, href)
        for item in response["objects"]:
            if item.get("oid") not in allowed and "actions" in item:
                item.pop("actions")
                item.pop("authenticated", None)
                item["error"] = {"code": 404, "message": "object does not exist"}
            download = item.get("actions", {}).get("download")
            if download and download["href"].startswith(base):
                download["header"] = {"Authorization": request.headers.get("authorization", "")}
        return response

    try:
        response = await asyncio.to_thread(answer)
    except RequestError as exc:
        return JSONResponse(
            {"message": exc.message}, status_code=exc.status, media_type=LFS_MEDIA_TYPE
        )
    except ArtifactError as exc:
        return JSONResponse({"message": str(exc)}, status_code=503, media_type=LFS_MEDIA_TYPE)
    return JSONResponse(response, media_type=LFS_MEDIA_TYPE)


@router.get("/reef/lfs/{scenario}/objects/{oid}", responses=openapi.errors(400, 401, 403, 404, 503))
async def lfs_object(scenario: str, oid: str, request: Request) -> StreamingResponse:
    """One object of a scenario's releases, streamed and sha256-verified."""
    ctx = context_of(request)
    ctx.authenticate(request, "read").require_scenario(checked_scenario(scenario))
    view = registry.find(ctx, scenario)
    if oid not in await asyncio.to_thread(_scenario_oids, ctx, view):
        raise RequestError(404, "unknown_object", f"no object {oid} in {scenario!r}")
    reader = await asyncio.to_thread(ctx.content.store.open, oid)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while chunk := await asyncio.to_thread(reader.read, 1 << 20):
                yield chunk
        finally:
            reader.close()

    return StreamingResponse(chunks(), media_type="application/octet-stream")
