"""The inference routes, dispatched before FastAPI's router: the serving hot path.

Every model call an agent makes goes through one of four POST routes. Below the app's
outer middleware (server errors, body limit, metrics) FastAPI would take such a request
through its exception middleware, exit-stack middleware, router (a match against every
route), the included router's handler and its request-response wrapper before the
endpoint runs, a cost paid on every model call (``docs/performance.md``). This ASGI
layer matches the four paths exactly and calls the same :func:`reef.api.inference.serve`
the routes call, with the same error mapping (:func:`reef.api.errors.reef_error_response`);
everything else, including any other method or a path that differs by a byte, falls
through to FastAPI unchanged. The routes stay declared on the router, for the OpenAPI
document and as the fallback.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from reef.api.errors import reef_error_response
from reef.api.inference import INFERENCE_ROUTES, serve
from reef.core.errors import ReefError


class HotRoutes:
    """ASGI middleware: POSTs to the inference routes skip the framework's router."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        dialect = (
            INFERENCE_ROUTES.get(scope["path"])
            if scope["type"] == "http" and scope["method"] == "POST"
            else None
        )
        if dialect is None:
            await self._app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await serve(request, scope["path"], dialect)
        except ReefError as exc:
            response = reef_error_response(request, exc)
        await response(scope, receive, send)
