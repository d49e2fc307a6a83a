"""The FastAPI application and the lifespan that owns its resources.

Start order: open the log and ensure topics → replay the projection to the log's end →
start the embedded processors in a child process (embedded log) → start the local engine
and its sidecar (no upstream configured) → start the in-process trainer (embedded log) →
open the upstream client → serve. Shutdown runs the same steps in reverse, after
in-flight background records (diagnostic stream records) are flushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from recipes.registry import recipe_from_settings
from reef import __version__
from reef.api import errors, inference, openapi, releases, reports, scenarios, system
from reef.api.auth import registry_from
from reef.api.context import AppContext, watch_processor_lag
from reef.api.metrics import Metrics
from reef.api.ratelimit import limiter_from
from reef.api.reports import ReportDesk
from reef.api.upstream import Upstream
from reef.artifacts import ClaimCheck
from reef.core.topics import LOG_TOPICS
from reef.crypto import open_keyring
from reef.engine.engine_client import AsyncEngineClient
from reef.hosts.worker import processor_process
from reef.local_engine import local_engine
from reef.log import open_log, running
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef.services.projection import ProjectionFollower
from reef.services.releases import ContentStore, open_store
from reef.settings import Settings
from reef.sidecar.runner import Sidecar, SidecarConfig
from trainers.runner import in_process_trainer

logger = logging.getLogger(__name__)


def producer_name(settings: Settings) -> str:
    return settings.producer_id or f"{socket.gethostname()}-{os.getpid()}"


async def _publish_seed(settings: Settings, content: ContentStore) -> str | None:
    """The seed folder new scenarios start from, published once (idempotent)."""
    if settings.seed_dir is None:
        return None
    return await asyncio.to_thread(content.publish_dir, settings.seed_dir)


def create_app(settings: Settings) -> FastAPI:
    """Build the app; configuration errors (e.g. no token) raise here, before serving."""
    tokens = registry_from(settings)
    producer = producer_name(settings)
    metrics = Metrics()
    # the embedded log runs the recipe's trainer in this process: a recipe configuration it
    # cannot read stops the server here, before it serves
    recipe = recipe_from_settings(settings) if settings.log == "embedded" else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            log = open_log(settings, client_id=f"reef-api-{producer}")
            await stack.enter_async_context(running(log))
            await log.ensure_topics(list(LOG_TOPICS))
            artifacts = open_store(settings)
            content = ContentStore(artifacts)
            seed = await _publish_seed(settings, content)
            # exchanges are sealed under per-record data keys (erasure destroys the key)
            keys = open_keyring(log)
            await keys.start()
            stack.push_async_callback(keys.close)
            store = EventStore(
                log, claims=ClaimCheck(artifacts, settings.claim_check_bytes), keys=keys
            )
            projection = ProjectionFollower(store)
            await projection.start()
            stack.push_async_callback(projection.close)
            if isinstance(log, EmbeddedLog):
                # processors see claim-checked bodies as references (as on Kafka and in
                # replay); they run in a child process so the API keeps its own core
                await stack.enter_async_context(processor_process(settings))
            serving = settings
            if settings.upstream_url is None:
                engine_url = await stack.enter_async_context(
                    local_engine(settings.engine_model, settings.state_dir / "logs")
                )
                serving = settings.model_copy(
                    update={"upstream_url": f"{engine_url}/v1", "upstream_dialect": "openai"}
                )
                if settings.engine_scenario:
                    await stack.enter_async_context(
                        _sidecar(settings, store, content, engine_url, producer)
                    )
            trainer = None
            if isinstance(log, EmbeddedLog):
                trainer = await stack.enter_async_context(
                    in_process_trainer(settings, store, content, producer, recipe=recipe)
                )
            upstream = Upstream(serving)
            stack.push_async_callback(upstream.aclose)
            ctx = AppContext(
                serving,
                producer,
                store,
                projection,
                upstream,
                tokens,
                content=content,
                seed_content_id=seed,
                trainer=trainer,
            )
            stack.push_async_callback(ctx.drain)
            app.state.ctx = ctx
            lag = asyncio.create_task(watch_processor_lag(ctx), name="processor-lag")
            stack.push_async_callback(_cancel, lag)
            metrics.bind(ctx)
            store.observe_append = metrics.append_seconds.observe
            app.state.report_desk = ReportDesk()
            app.state.report_limiter = limiter_from(settings)
            yield

    app = FastAPI(title="Reef", version=__version__, lifespan=lifespan)
    app.state.metrics = metrics
    app.add_middleware(_Instrumented, metrics=metrics)
    errors.install(app)
    app.openapi = openapi.finish(app)  # type: ignore[method-assign]
    for module in (system, inference, reports, scenarios, releases):
        app.include_router(module.router)
    return app


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class _Instrumented:
    """Starlette middleware factory for :meth:`Metrics.middleware`."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self._wrapped = metrics.middleware(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._wrapped(scope, receive, send)


@contextlib.asynccontextmanager
async def _sidecar(
    settings: Settings, store: EventStore, content: ContentStore, engine_url: str, producer: str
) -> AsyncIterator[None]:
    """The local engine's sidecar, in-process: it hot-loads ``engine_scenario``'s releases."""
    assert settings.engine_scenario is not None
    config = SidecarConfig(
        engine_id="local",
        scenario=settings.engine_scenario,
        cache_dir=settings.state_dir / "engine-cache",
        producer=producer,
    )
    engine = AsyncEngineClient(engine_url)
    task = asyncio.create_task(Sidecar(config, store, content, engine).run(), name="sidecar")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await engine.aclose()
