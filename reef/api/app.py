"""The FastAPI application: routes, errors, metrics and the request-side state.

It starts nothing itself. :func:`build_app` takes ``open_context``, an async context
manager that yields the :class:`~reef.api.context.AppContext` with every resource
running (log, key ring, store, projection, upstream, and on the embedded log the
processors, engine and trainer); :mod:`reef.wiring` assembles it. On shutdown the
lag watcher stops first, then ``open_context`` closes what it opened, in reverse.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from reef import __version__
from reef.api import (
    errors,
    harness,
    inference,
    openapi,
    releases,
    reports,
    rollouts,
    scenarios,
    system,
)
from reef.api.context import AppContext
from reef.api.hot_routes import HotRoutes
from reef.api.metrics import Metrics
from reef.api.ratelimit import limiter_from
from reef.api.reports import ReportDesk
from reef.api.rollout_deadlines import watch_rollout_deadlines
from reef.settings import Settings

OpenContext = Callable[[], AbstractAsyncContextManager[AppContext]]


def build_app(settings: Settings, open_context: OpenContext) -> FastAPI:
    """The app over the context ``open_context`` yields while it serves."""
    metrics = Metrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_context() as ctx:
            app.state.ctx = ctx
            lag = asyncio.create_task(ctx.processors.run(), name="processor-lag")
            deadlines = (
                asyncio.create_task(watch_rollout_deadlines(ctx), name="rollout-deadlines")
                if settings.deployment.rollouts
                else None
            )
            try:
                metrics.bind(ctx)
                ctx.store.observe_append = metrics.append_seconds.observe
                app.state.report_desk = ReportDesk()
                app.state.report_limiter = limiter_from(settings.reports)
                # what start-up built lives as long as the app: out of the collector's
                # sight, a request's garbage no longer makes it traverse all of it again
                gc.freeze()
                yield
            finally:
                gc.unfreeze()
                for task in (lag, deadlines):
                    if task is not None:
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task

    # FastAPI's own OpenTelemetry layer asks, on every request, whether a provider is
    # configured: work on the hot path for a layer Reef does not use
    app = FastAPI(
        title="Reef",
        version=__version__,
        lifespan=lifespan,
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.metrics = metrics
    # added first, so it runs innermost: inside the metrics, before FastAPI's router
    app.add_middleware(HotRoutes)
    app.add_middleware(_Instrumented, metrics=metrics)
    errors.install(app)
    app.openapi = openapi.finish(app)  # type: ignore[method-assign]
    for module in (system, inference, reports, scenarios, releases, rollouts, harness):
        app.include_router(module.router)
    return app


class _Instrumented:
    """Starlette middleware factory for :meth:`Metrics.middleware`."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self._wrapped = metrics.middleware(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._wrapped(scope, receive, send)
