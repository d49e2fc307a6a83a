"""The engine's FastAPI app: SGLang's native API plus OpenAI chat completions.

The lifespan owns the process resources: it loads the model (in a worker thread, so a
large folder does not block the loop), builds the :class:`EngineRuntime`, and on
shutdown leaves any weight-update group still joined. Engine errors a request causes
(unknown adapter, prompt too long, bad body) map to HTTP 400 once, here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from reef.engine import routes_native, routes_openai
from reef.engine.config import EngineConfig
from reef.engine.errors import EngineError
from reef.engine.loader import load_engine_model
from reef.engine.model import EngineModel
from reef.engine.runtime import EngineRuntime


async def _engine_error(request: Request, exc: Exception) -> JSONResponse:
    body = {"error": {"message": str(exc), "type": "invalid_request_error", "code": 400}}
    return JSONResponse(body, status_code=400)


def create_app(config: EngineConfig, model: EngineModel | None = None) -> FastAPI:
    """The ASGI app; ``model`` skips loading (tests hand in a prepared one)."""

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
    app.add_exception_handler(EngineError, _engine_error)
    return app
