"""The FastAPI application and the lifespan that owns its resources.

Start order: open the log and ensure topics → replay the projection to the log's end →
open the upstream client → serve. Shutdown reverses it after in-flight background
records (diagnostic stream records) are flushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator

from fastapi import FastAPI

from reef import __version__
from reef.api import errors, inference, releases, reports, scenarios, system
from reef.api.auth import registry_from
from reef.api.context import AppContext
from reef.api.metrics import Metrics
from reef.api.reports import ReportDesk
from reef.api.upstream import Upstream
from reef.artifacts import ClaimCheck
from reef.eventstore import EventStore
from reef.log import open_log
from reef.log.embedded import EmbeddedLog
from reef.processors.catalog import processors
from reef.processors.embedded import EmbeddedRuntime
from reef.projection import ProjectionFollower
from reef.releases import ContentStore, open_store
from reef.settings import Settings
from reef.topics import ALL_TOPICS

logger = logging.getLogger(__name__)


def producer_name(settings: Settings) -> str:
    return settings.producer_id or f"{socket.gethostname()}-{os.getpid()}"


async def _publish_seed(settings: Settings, content: ContentStore) -> str | None:
    """The seed folder new scenarios start from, published once (idempotent)."""
    if settings.seed_dir is None:
        return None
    return await asyncio.to_thread(content.publish_dir, settings.seed_dir)


async def _start_embedded_processors(
    settings: Settings, store: EventStore
) -> list[EmbeddedRuntime]:
    """On the embedded log the stream processors run inside ``reef serve``."""
    log = store.log
    if not isinstance(log, EmbeddedLog):
        return []
    # processors see claim-checked bodies as references (as on Kafka and in replay): their
    # state and outputs stay small, and a trainer resolves what it needs
    runtimes = [EmbeddedRuntime(log, processor) for processor in processors(settings)]
    for runtime in runtimes:
        await runtime.start()
    return runtimes


def create_app(settings: Settings) -> FastAPI:
    """Build the app; configuration errors (e.g. no token) raise here, before serving."""
    tokens = registry_from(settings)
    producer = producer_name(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log = open_log(settings, client_id=f"reef-api-{producer}")
        await log.start()
        try:
            await log.ensure_topics(list(ALL_TOPICS))
            artifacts = open_store(settings)
            content = ContentStore(artifacts)
            seed = await _publish_seed(settings, content)
            store = EventStore(log, claims=ClaimCheck(artifacts, settings.claim_check_bytes))
            projection = ProjectionFollower(store)
            await projection.start()
            runtimes = await _start_embedded_processors(settings, store)
            upstream = Upstream(settings)
            ctx = AppContext(
                settings,
                producer,
                store,
                projection,
                upstream,
                tokens,
                content=content,
                seed_content_id=seed,
                runtimes=runtimes,
            )
            app.state.ctx = ctx
            metrics.bind(ctx)
            store.observe_append = metrics.append_seconds.observe
            app.state.report_desk = ReportDesk()
            try:
                yield
            finally:
                await ctx.drain()
                for runtime in runtimes:
                    await runtime.close()
                await projection.close()
                await upstream.aclose()
        finally:
            await log.close()

    metrics = Metrics()
    app = FastAPI(title="Reef", version=__version__, lifespan=lifespan)
    app.state.metrics = metrics
    app.middleware("http")(metrics.middleware)
    errors.install(app)
    for module in (system, inference, reports, scenarios, releases):
        app.include_router(module.router)
    return app
