"""The hot-path dispatcher: which requests it takes from FastAPI's router, and its errors."""

from __future__ import annotations

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from reef.api import hot_routes
from reef.api.dialects import Dialect
from reef.core.errors import LogUnavailableError, RequestError


class Inner:
    """Stands for the FastAPI app below the dispatcher: records what reaches it."""

    def __init__(self) -> None:
        self.paths: list[tuple[str, str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.paths.append((scope["method"], scope["path"]))
        await PlainTextResponse("router")(scope, receive, send)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Dialect]]:
    calls: list[tuple[str, Dialect]] = []

    async def serve(request: Request, route: str, dialect: Dialect) -> Response:
        calls.append((route, dialect))
        body = await request.body()
        if body == b"refuse":
            raise RequestError(429, "rate_limited", "slow down", {"retry-after": "1"})
        if body == b"log-down":
            raise LogUnavailableError("disk full")
        return PlainTextResponse("hot")

    monkeypatch.setattr(hot_routes, "serve", serve)
    return calls


async def _post(inner: Inner, method: str, path: str, body: bytes = b"{}") -> httpx.Response:
    transport = httpx.ASGITransport(app=hot_routes.HotRoutes(inner))
    async with httpx.AsyncClient(transport=transport, base_url="http://reef") as client:
        return await client.request(method, path, content=body)


@pytest.mark.parametrize(
    ("path", "dialect"),
    [
        ("/v1/chat/completions", Dialect.OPENAI),
        ("/v1/responses", Dialect.OPENAI),
        ("/v1/messages", Dialect.ANTHROPIC),
        ("/v1/messages/count_tokens", Dialect.ANTHROPIC),
    ],
)
async def test_the_inference_posts_are_served_without_the_router(
    served: list[tuple[str, Dialect]], path: str, dialect: Dialect
) -> None:
    inner = Inner()
    response = await _post(inner, "POST", path)
    assert response.text == "hot" and inner.paths == [] and served == [(path, dialect)]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/chat/completions"),
        ("POST", "/v1/chat/completions/"),
        ("POST", "/v1/models"),
        ("POST", "/reef/report"),
    ],
)
async def test_everything_else_reaches_the_router(
    served: list[tuple[str, Dialect]], method: str, path: str
) -> None:
    inner = Inner()
    response = await _post(inner, method, path)
    assert response.text == "router" and inner.paths == [(method, path)] and served == []


async def test_errors_answer_as_the_router_would(served: list[tuple[str, Dialect]]) -> None:
    refused = await _post(Inner(), "POST", "/v1/messages", b"refuse")
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert refused.json()["type"] == "error"  # the Anthropic shape on an Anthropic route
    assert refused.json()["error"]["type"] == "rate_limit_error"
    down = await _post(Inner(), "POST", "/v1/chat/completions", b"log-down")
    assert down.status_code == 503 and down.json()["error"]["code"] == "log_unavailable"
