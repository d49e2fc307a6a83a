"""Everything a request handler needs, created and closed by the app's lifespan."""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import Request

from reef.api.adapters import AdapterKinds
from reef.api.auth import INSECURE, Principal, Scope, TokenRegistry
from reef.api.background import BackgroundTasks
from reef.api.processor_watch import ProcessorWatch
from reef.api.rereading import RecentRequests
from reef.api.shadow import ShadowCopies
from reef.api.upstream import Upstream
from reef.artifacts.content import ContentStore
from reef.observability.tracing import Tracing
from reef.services.eventstore import EventStore
from reef.services.projection import ProjectionFollower
from reef.settings import Settings

logger = logging.getLogger(__name__)


class TrainerStatus(Protocol):
    """What the API shows of a trainer running in its process (``GET /reef/status``)."""

    def status(self) -> dict[str, Any]: ...


class JudgeStatus(Protocol):
    """What the API shows of a judge running in its process (``GET /reef/status``)."""

    def status(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class AppContext:
    """The dependencies request handlers use; each owns its own state and tasks."""

    settings: Settings
    producer: str
    store: EventStore
    projection: ProjectionFollower
    upstream: Upstream
    tokens: TokenRegistry | None
    content: ContentStore
    #: the deployment's processors, their lag and live rollouts (shown in status, metrics)
    processors: ProcessorWatch
    #: work requests start that must finish even if the request is cancelled
    background: BackgroundTasks
    #: the shadow rollouts' copies in flight (reef.api.shadow)
    shadows: ShadowCopies
    #: whether a release's weights are a LoRA adapter (reef.api.adapters)
    adapters: AdapterKinds
    #: each session's latest request, to read the next by what is new in it
    requests: RecentRequests
    seed_content_id: str | None = None
    #: the recipe's trainer when it runs inside this process (embedded default)
    trainer: TrainerStatus | None = None
    #: the judge when it runs inside this process (embedded log, ``judge_turns`` on)
    judge: JudgeStatus | None = None
    #: exchange and report spans (None: tracing is off, and no tracing code runs)
    tracing: Tracing | None = None

    def authenticate(self, request: Request, *scopes: Scope) -> Principal:
        """The caller, who must hold one of ``scopes``; raises 401/403 otherwise."""
        if self.tokens is None:
            return INSECURE
        principal = self.tokens.authenticate(presented_token(request))
        principal.require(*scopes)
        return principal


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
