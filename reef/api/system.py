"""Health and status."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from reef.api.context import context_of

router = APIRouter()


@router.get("/healthz")
async def healthz() -> JSONResponse:
    """Liveness, no authentication.

    curl http://127.0.0.1:8900/healthz
    """
    return JSONResponse({"ok": True})


@router.get("/reef/status")
async def status(request: Request) -> JSONResponse:
    """Per-scenario heads and the state of this replica's projection.

    curl -H "Authorization: Bearer $REEF_TOKEN" http://127.0.0.1:8900/reef/status
    """
    ctx = context_of(request)
    principal = ctx.authenticate(request, "read")
    scenarios = {
        name: {"recipe": view.recipe, "head_release_id": view.head, "releases": len(view.releases)}
        for name, view in sorted(ctx.projection.state.scenarios.items())
        if principal.may_use(name)
    }
    return JSONResponse(
        {
            "producer": ctx.producer,
            "log": ctx.settings.log,
            "projection": {
                "healthy": ctx.projection.healthy(),
                "digest": ctx.projection.state.digest(),
            },
            "processors": {
                runtime.processor.name: {
                    "healthy": runtime.healthy(),
                    "lag": await runtime.lag(),
                    "processed": runtime.processed,
                }
                for runtime in ctx.runtimes
            },
            "scenarios": scenarios,
        }
    )
