"""The harness of a release, as files, as a catalogue, and as an install script.

``GET /reef/harness`` serves a release's files (``release_id`` fields, and
``artifact_version`` for the published ``reef-client``); ``/reef/harness/releases`` and
``/reef/harness/versions`` list the chain oldest first with each release's gate
metrics; ``/reef/harness/install`` renders the release for one agent
(:mod:`reef.harness`) into a self-contained ``sh`` script. All need ``read`` and the
``x-reef-scenario`` header. A pin by ``?release_id=`` or ``?version=`` names one
release of the scenario; anything else is 404. Of a composite release
(:mod:`reef.artifacts.parts`) only the harness part is served.

Unpinned, the files and the install script are those of the release that serves the
caller: the head, or during a canary rollout the arm the caller's session
(``x-reef-tag-session``) is routed to, by the same draw as its exchanges
(:func:`reef.core.routing.route`), so an agent that installs a candidate's harness has
its exchanges recorded as the candidate's. A fetch without a session tag gets the head.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from reef.api import openapi, registry
from reef.api.context import AppContext, context_of
from reef.api.inputs import scenario_header, tags_of
from reef.api.releases import RELEASE_HEADER, find_release
from reef.artifacts.parts import harness_part
from reef.core import routing
from reef.core.errors import RequestError
from reef.harness import HarnessTreeError, UnknownAdapterError, release_install_script
from reef.services.projection import ReleaseView, ScenarioView

router = APIRouter()

ARTIFACT_VERSION_HEADER = "x-reef-artifact-version"
SHELL_SCRIPT = "text/x-shellscript"


def _scenario(request: Request) -> tuple[AppContext, ScenarioView]:
    ctx = context_of(request)
    principal = ctx.authenticate(request, "read")
    scenario = scenario_header(request)
    principal.require_scenario(scenario)
    return ctx, registry.find(ctx, scenario)


def _pinned(view: ScenarioView, release_id: str | None, version: str | None) -> ReleaseView:
    if release_id and version and release_id != version:
        raise RequestError(400, "conflicting_pins", "release_id and version name two releases")
    return find_release(view, release_id or version or view.head)


def _serving(
    request: Request,
    ctx: AppContext,
    view: ScenarioView,
    release_id: str | None,
    version: str | None,
) -> ReleaseView:
    """The pinned release, else the one that serves the caller's session (module doc)."""
    session = tags_of(request).get("session")
    if release_id or version or not session:
        return _pinned(view, release_id, version)
    key = routing.routing_key(session, "")
    chosen = routing.route(view.name, key, ctx.projection.state.rollouts)
    return find_release(view, view.head if chosen is None else chosen.release_id)


def _row(release: ReleaseView, head: str, step: int) -> dict[str, Any]:
    return {"step": step, "artifact_version": release.release_id, **release.as_json(head)}


@router.get(
    "/reef/harness",
    responses=openapi.errors(400, 401, 403, 404, 503),
    openapi_extra=openapi.declare(scenario_header=True),
)
async def harness(
    request: Request, release_id: str | None = None, version: str | None = None
) -> JSONResponse:
    """The files of the current (or a pinned) release of a harness scenario.

    curl -H "Authorization: Bearer $REEF_TOKEN" -H "x-reef-scenario: demo" \\
      "http://127.0.0.1:8900/reef/harness?release_id=<id>"
    """
    ctx, view = _scenario(request)
    release = _serving(request, ctx, view, release_id, version)
    files = harness_part(await asyncio.to_thread(ctx.content.read_text_files, release.content_id))
    return JSONResponse(
        {
            "release_id": release.release_id,
            "parent_release_id": release.parent_release_id,
            "content_id": release.content_id,
            "artifact_version": release.release_id,
            "parent_artifact_version": release.parent_release_id,
            "files": files,
            "evaluation": release.evaluation,
        },
        headers={RELEASE_HEADER: release.release_id, ARTIFACT_VERSION_HEADER: release.release_id},
    )


@router.get(
    "/reef/harness/releases",
    responses=openapi.errors(400, 401, 403, 404),
    openapi_extra=openapi.declare(scenario_header=True),
)
async def harness_releases(request: Request) -> JSONResponse:
    """The scenario's releases, oldest first (step 0 is the creation), with gate metrics.

    curl -H "Authorization: Bearer $REEF_TOKEN" -H "x-reef-scenario: demo" \\
      http://127.0.0.1:8900/reef/harness/releases
    """
    _, view = _scenario(request)
    rows = [_row(r, view.head, step) for step, r in enumerate(view.releases)]
    return JSONResponse({"scenario": view.name, "head": view.head, "releases": rows})


@router.get(
    "/reef/harness/versions",
    responses=openapi.errors(400, 401, 403, 404),
    openapi_extra=openapi.declare(scenario_header=True),
)
async def harness_versions(request: Request) -> JSONResponse:
    """The same catalogue as ``/reef/harness/releases`` in the published client's shape.

    curl -H "Authorization: Bearer $REEF_TOKEN" -H "x-reef-scenario: demo" \\
      http://127.0.0.1:8900/reef/harness/versions
    """
    _, view = _scenario(request)
    rows = [_row(r, view.head, step) for step, r in enumerate(view.releases)]
    return JSONResponse({"scenario": view.name, "versions": rows})


@router.get(
    "/reef/harness/install",
    responses={
        200: {"description": "A POSIX sh install script", "content": {SHELL_SCRIPT: {}}},
        **openapi.errors(400, 401, 403, 404, 409, 503),
    },
    openapi_extra=openapi.declare(scenario_header=True),
)
async def harness_install(
    request: Request, adapter: str, release_id: str | None = None, version: str | None = None
) -> Response:
    """A self-contained sh script installing the release's harness for one agent.

    curl -fsS -H "Authorization: Bearer $REEF_TOKEN" -H "x-reef-scenario: demo" \\
      "http://127.0.0.1:8900/reef/harness/install?adapter=claude" | sh -s -- ~/.claude
    """
    ctx, view = _scenario(request)
    release = _serving(request, ctx, view, release_id, version)
    files = harness_part(await asyncio.to_thread(ctx.content.read_text_files, release.content_id))
    script = _script(files, adapter, view.name, release.release_id)
    return Response(
        script,
        media_type=SHELL_SCRIPT,
        headers={RELEASE_HEADER: release.release_id, "cache-control": "no-store"},
    )


def _script(files: dict[str, str], adapter_name: str, scenario: str, release_id: str) -> str:
    """Render and script, with the harness errors translated once into HTTP answers."""
    try:
        return release_install_script(files, adapter_name, scenario=scenario, release_id=release_id)
    except UnknownAdapterError as exc:
        raise RequestError(404, exc.code, str(exc)) from exc
    except HarnessTreeError as exc:
        raise RequestError(
            409, exc.code, f"release {release_id} cannot be installed: {exc}"
        ) from exc
