"""The engine's FastAPI app: SGLang's native API, OpenAI chat completions and Responses,
and Anthropic messages.

The lifespan owns the process resources: it loads the model (in a worker thread, so a
large folder does not block the loop), builds the :class:`EngineRuntime`, and on
shutdown leaves any weight-update group still joined. Engine errors a request causes
(unknown adapter, prompt too long, bad body) map to HTTP 400 once, here, in the error
shape of the route's dialect.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from reef.api.dialects import Dialect, dialect_of_path, error_body
from reef.engine import routes_anthropic, routes_native, routes_openai, routes_responses
from reef.engine.config import EngineConfig
from reef.engine.errors import EngineError
from reef.engine.loader import load_engine_model
from reef.engine.model import EngineModel
from reef.engine.runtime import EngineRuntime
from reef.engine.tool_parsers import parser_for


async def _engine_error(request: Request, exc: Exception) -> JSONResponse:
    dialect = dialect_of_path(request.url.path)
    if dialect is Dialect.REEF:  # SGLang's native routes keep their OpenAI-like shape
        body = {"error": {"message": str(exc), "type": "invalid_request_error", "code": 400}}
    else:
        body = error_body(dialect, 400, "invalid_request", str(exc))
    return JSONResponse(body, status_code=400)


def create_app(config: EngineConfig, model: EngineModel | None = None) -> FastAPI:
    """The ASGI app; ``model`` skips loading (tests hand in a prepared one)."""
    parser_for(config.tool_call_parser, config.model)  # an unknown name fails here

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine_model = (
            model
            if model is not None
            else await asyncio.to_thread(
                load_engine_model,
                config.model,
                device=config.device,
                weight_version=config.weight_version,
            )
        )
        runtime = EngineRuntime(engine_model, config)
        app.state.runtime = runtime
        try:
            yield
        finally:
            if runtime.group.name is not None:
                with contextlib.suppress(EngineError):
                    await asyncio.to_thread(runtime.group.leave, runtime.group.name)

    app = FastAPI(title="Reef engine", lifespan=lifespan)
    app.include_router(routes_native.router)
    app.include_router(routes_openai.router)
    app.include_router(routes_anthropic.router)
    app.include_router(routes_responses.router)
    app.add_exception_handler(EngineError, _engine_error)
    return app
