"""The one place that assembles the system from settings.

Everything else receives what it uses: the API gets a running
:class:`~reef.api.context.AppContext`, replay gets the processors and the host's durable
tables. Readers of the history (tools, analytics) are assembled by :mod:`reef.history`
(``open_stream``, ``readable_store``: re-exported here for the tools that import it from
this module), through the same factories. Only this module, the command modules
(``reef/cli``) and that reader choose adapters; only this module and the command modules
import ``trainers``, ``recipes.registry`` or ``streams``
(``tests/architecture/test_layers.py`` holds them to it).

Start order of ``reef serve`` (:func:`serving_context`): open the log and ensure topics ->
publish the seed folder -> start the key ring -> replay the projection to the log's end
-> on the embedded log, start the processors in a child process -> with no upstream, start
the local engine (and its sidecar when ``engine_scenario`` is set) -> on the embedded
log, start the recipe's trainer in this process -> on the embedded log with sessions
tracked and ``judge_turns`` on, start the judge in this process -> open the upstream
client -> serve. An API-only process (``serve_role: api``, the other workers of ``reef serve
--workers``) opens the log, key ring, projection and upstream client, and nothing else.
Shutdown runs the same steps in reverse, after in-flight background records (diagnostic
stream records) are flushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI

from recipes.base import Recipe
from recipes.registry import recipe_from_settings
from reef.api.adapters import AdapterKinds
from reef.api.app import build_app
from reef.api.auth import TokenRegistry, registry_from
from reef.api.background import BackgroundTasks
from reef.api.context import AppContext
from reef.api.processor_watch import ProcessorWatch
from reef.api.rereading import RecentRequests
from reef.api.shadow import ShadowCopies
from reef.api.upstream import Upstream
from reef.artifacts import ClaimCheck, open_store
from reef.artifacts.content import ContentStore
from reef.catalog import processors
from reef.core.errors import ConfigError
from reef.core.topics import LOG_TOPICS
from reef.crypto.rings import open_keyring
from reef.engine.engine_client import AsyncEngineClient
from reef.history import readable_store as readable_store  # tools' readers: reef.history
from reef.hosts import embedded as embedded_host
from reef.hosts.worker import processor_process
from reef.local_engine import local_engine
from reef.log import open_log, running
from reef.log.wire_format import open_codec
from reef.observability.tracing import open_tracing
from reef.services.eventstore import EventStore
from reef.services.judge import in_process_judge
from reef.services.projection import FOLLOWED_TOPICS, SPEND_TOPICS, ProjectionFollower
from reef.services.replay import DurableRows, DurableTables
from reef.settings import Settings
from reef.sidecar.runner import Sidecar, SidecarConfig
from streams import changelog
from trainers.runner import in_process_trainer


def create_app(settings: Settings) -> FastAPI:
    """The app ``reef serve`` runs; configuration errors (e.g. no token) raise here."""
    tokens = registry_from(settings.auth)
    if settings.api.role == "api" and settings.upstream.url is None:
        # the local engine runs once, in the process that runs everything
        raise ConfigError("an API-only process (serve_role api) needs an upstream URL")
    # the embedded log runs the recipe's trainer in this process: a recipe configuration it
    # cannot read stops the server here, before it serves
    recipe = recipe_from_settings(settings) if _runs_once(settings) else None
    producer = producer_name(settings)
    return build_app(
        settings, functools.partial(serving_context, settings, producer, tokens, recipe)
    )


def producer_name(settings: Settings) -> str:
    return settings.deployment.producer_id or f"{socket.gethostname()}-{os.getpid()}"


def _runs_once(settings: Settings) -> bool:
    """Whether this process runs the embedded deployment's processors, trainer and judge.

    On Kafka they are separate commands (``reef streams``, ``reef trainer``, ``reef
    judge``); on the embedded log the first of ``reef serve --workers`` runs them.
    """
    return settings.deployment.log == "embedded" and settings.api.role == "all"


@contextlib.asynccontextmanager
async def serving_context(
    settings: Settings, producer: str, tokens: TokenRegistry | None, recipe: Recipe[Any] | None
) -> AsyncIterator[AppContext]:
    """Every resource the API serves with, running (see the module doc for the order)."""
    runs_once = _runs_once(settings)
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
        claims = ClaimCheck(artifacts, settings.artifacts.claim_check_bytes)
        store = EventStore(
            log,
            open_codec(settings),
            claims=claims,
            keys=keys,
            body_format=settings.artifacts.body_format,
        )
        # spend (status, metrics) is folded from every recorded exchange: only when priced
        projection = ProjectionFollower(
            store, followed=SPEND_TOPICS if settings.recording.prices else FOLLOWED_TOPICS
        )
        await projection.start()
        stack.push_async_callback(projection.close)
        if runs_once:
            # processors see claim-checked bodies as references (as on Kafka and in
            # replay); they run in a child process so the API keeps its own core
            await stack.enter_async_context(processor_process(settings))
        serving = settings
        if settings.upstream.url is None:
            engine_url = await stack.enter_async_context(
                local_engine(
                    settings.engine.model,
                    settings.deployment.state_dir / "logs",
                    settings.engine.tool_call_parser,
                    settings.engine.device,
                )
            )
            serving = settings.replace(upstream_url=f"{engine_url}/v1", upstream_dialect="openai")
            if settings.engine.scenario:
                await stack.enter_async_context(
                    _sidecar(settings, store, content, engine_url, producer)
                )
        # before the trainer, whose training spans link to the reports this process receives
        tracing = await stack.enter_async_context(
            open_tracing(settings.otel, serving.upstream.dialect)
        )
        trainer = judge = None
        if runs_once:
            trainer = await stack.enter_async_context(
                in_process_trainer(
                    settings, store, content, producer, recipe=recipe, tracing=tracing
                )
            )
            # the judge asks the serving upstream (the local engine when none is set)
            # unless a judge URL is configured
            judge = await stack.enter_async_context(in_process_judge(serving, store, producer))
        upstream = Upstream(serving.upstream, serving.recording)
        stack.push_async_callback(upstream.aclose)
        # at shutdown the shadow copies end first (within their grace), then the rest
        background = BackgroundTasks()
        stack.push_async_callback(background.drain)
        shadows = ShadowCopies(
            limit=settings.api.shadow_max_in_flight, grace_s=settings.api.shadow_grace_s
        )
        stack.push_async_callback(shadows.close)
        ctx = AppContext(
            serving,
            producer,
            store,
            projection,
            upstream,
            tokens,
            content=content,
            processors=ProcessorWatch(
                store.log,
                settings.deployment.log,
                processors(settings),
                durable_rows(settings) if settings.deployment.rollouts else None,
            ),
            background=background,
            shadows=shadows,
            adapters=AdapterKinds(content),
            requests=RecentRequests(),
            seed_content_id=seed,
            trainer=trainer,
            judge=judge,
            tracing=tracing,
        )
        yield ctx


async def _publish_seed(settings: Settings, content: ContentStore) -> str | None:
    """The seed folder new scenarios start from, published once (idempotent)."""
    if settings.deployment.seed_dir is None:
        return None
    return await asyncio.to_thread(content.publish_dir, settings.deployment.seed_dir)


@contextlib.asynccontextmanager
async def _sidecar(
    settings: Settings, store: EventStore, content: ContentStore, engine_url: str, producer: str
) -> AsyncIterator[None]:
    """The local engine's sidecar, in-process: it hot-loads ``engine_scenario``'s releases."""
    assert settings.engine.scenario is not None
    config = SidecarConfig(
        engine_id="local",
        scenario=settings.engine.scenario,
        cache_dir=settings.deployment.state_dir / "engine-cache",
        producer=producer,
        load_method=settings.engine.load_method,
        push_wait_s=settings.engine.push_wait_s,
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


def durable_tables(settings: Settings) -> DurableTables:
    """How the deployment's processor host reads back the state it holds durably."""
    if settings.deployment.log == "embedded":
        return embedded_host.durable_tables
    return changelog.durable_tables


def durable_rows(settings: Settings) -> DurableRows:
    """How to read some rows of one processor's durable state (the API's rollout figures)."""
    if settings.deployment.log == "embedded":
        return embedded_host.durable_rows
    return changelog.durable_rows
