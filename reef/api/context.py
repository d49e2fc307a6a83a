"""Everything a request handler needs, created and closed by the app's lifespan."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from fastapi import Request

from reef.api.auth import INSECURE, Principal, Scope, TokenRegistry
from reef.api.shadow import ShadowCopies
from reef.api.upstream import Upstream
from reef.artifacts.content import ContentStore
from reef.core.errors import ReefError
from reef.core.rollout_control import LIVE_PREFIX, RolloutController
from reef.core.state import Processor
from reef.core.topics import STREAMS_APP_ID
from reef.observability.tracing import Tracing
from reef.services.eventstore import EventStore
from reef.services.projection import ProjectionFollower
from reef.services.replay import DurableRows
from reef.settings import Settings

logger = logging.getLogger(__name__)


class TrainerStatus(Protocol):
    """What the API shows of a trainer running in its process (``GET /reef/status``)."""

    def status(self) -> dict[str, Any]: ...


class JudgeStatus(Protocol):
    """What the API shows of a judge running in its process (``GET /reef/status``)."""

    def status(self) -> dict[str, Any]: ...


@dataclass(slots=True)
class AppContext:
    settings: Settings
    producer: str
    store: EventStore
    projection: ProjectionFollower
    upstream: Upstream
    tokens: TokenRegistry | None
    content: ContentStore
    #: the processors the deployment runs (their lag is shown in metrics)
    processors: Sequence[Processor] = ()
    seed_content_id: str | None = None
    #: input records each processor has not processed yet, per topic (refreshed in the
    #: background from the processors' committed offsets: they may run in other processes)
    processor_lag: dict[str, dict[str, int]] = field(default_factory=dict)
    #: the recipe's trainer when it runs inside this process (embedded default)
    trainer: TrainerStatus | None = None
    #: the judge when it runs inside this process (embedded log, ``judge_turns`` on)
    judge: JudgeStatus | None = None
    #: reads the rollout controller's durable rows (None: the deployment runs none)
    durable_rows: DurableRows | None = None
    #: the controller's live rollouts by scenario (refreshed in the background with the
    #: lag: the controller may run in another process)
    live_rollouts: dict[str, dict[str, Any]] = field(default_factory=dict)
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    #: the shadow rollouts' copies in flight (reef.api.shadow)
    shadows: ShadowCopies = field(default_factory=ShadowCopies)
    #: exchange and report spans (None: tracing is off, and no tracing code runs)
    tracing: Tracing | None = None
    #: content id → whether its weights are a LoRA adapter (reef.api.adapters)
    adapter_contents: dict[str, bool] = field(default_factory=dict)

    def authenticate(self, request: Request, *scopes: Scope) -> Principal:
        """The caller, who must hold one of ``scopes``; raises 401/403 otherwise."""
        if self.tokens is None:
            return INSECURE
        principal = self.tokens.authenticate(presented_token(request))
        principal.require(*scopes)
        return principal

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Run work that must finish even if the request that started it is cancelled."""
        task = asyncio.create_task(coro, name=name)
        self.background.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("background task %s failed", task.get_name(), exc_info=task.exception())

    async def drain(self) -> None:
        await self.shadows.close()
        if self.background:
            await asyncio.gather(*self.background, return_exceptions=True)


LAG_REFRESH_SECONDS = 2.0


def processor_group(settings: Settings, name: str) -> str:
    """The consumer group whose offsets record a processor's progress."""
    if settings.log == "embedded":
        return f"processor:{name}"
    return STREAMS_APP_ID  # the stream workers' group; the log adds the topic prefix


async def processor_lag(ctx: AppContext) -> dict[str, dict[str, int]]:
    log = ctx.store.log
    out: dict[str, dict[str, int]] = {}
    for processor in ctx.processors:
        group = processor_group(ctx.settings, processor.name)
        lag: dict[str, int] = {}
        for topic in processor.inputs:
            ends = await log.end_offsets(topic)
            done = await log.committed(group, topic)
            lag[topic] = sum(max(0, end - done.get(p, 0)) for p, end in ends.items())
        out[processor.name] = lag
    return out


async def live_rollouts(ctx: AppContext) -> dict[str, dict[str, Any]]:
    """The rollout controller's live rollouts, by scenario, as its host holds them."""
    if ctx.durable_rows is None:
        return {}
    rows = await ctx.durable_rows(ctx.store.log, RolloutController.name, LIVE_PREFIX)
    return {key.removeprefix(LIVE_PREFIX): value for key, value in rows.items()}


async def watch_processor_lag(ctx: AppContext) -> None:
    """Keep ``ctx.processor_lag`` and ``ctx.live_rollouts`` fresh for the metrics scrape
    (which cannot await)."""
    while True:
        with contextlib.suppress(ReefError):
            ctx.processor_lag = await processor_lag(ctx)
            ctx.live_rollouts = await live_rollouts(ctx)
        await asyncio.sleep(LAG_REFRESH_SECONDS)


def presented_token(request: Request) -> str | None:
    """Bearer token, or ``x-api-key`` on the Anthropic routes (so its SDK works unchanged)."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if scheme.lower() == "basic" and value.strip():  # git and git-lfs: the password is the token
        try:
            return base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            return None
    if request.url.path.startswith("/v1/messages"):
        return request.headers.get("x-api-key")
    return None


def context_of(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


def authorised(*scopes: Scope) -> Callable[[Request], Awaitable[Principal]]:
    """A route dependency: the caller, who must hold one of ``scopes``.

    FastAPI runs dependencies before it validates query and path parameters, so a route
    with validated parameters answers 401/403 to a wrong credential, never a 400 that
    tells an unauthenticated caller about its input.
    """

    async def caller(request: Request) -> Principal:
        return context_of(request).authenticate(request, *scopes)

    return caller
