"""HTTP mapping of Reef's error tree, registered once; every error answers JSON.

/v1/messages* answer in Anthropic's error shape, other /v1/* in OpenAI's, the rest in
Reef's own ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from reef.api.dialects import dialect_of_path, error_body
from reef.core.errors import LogUnavailableError, ReefError, RequestError, UnknownTopicError

logger = logging.getLogger(__name__)

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def error_response(
    request: Request,
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = error_body(dialect_of_path(request.url.path), status, code, message)
    extra = {"www-authenticate": "Bearer"} if status == 401 else {}
    return JSONResponse(body, status_code=status, headers={**extra, **(headers or {})} or None)


def reef_error_response(request: Request, exc: ReefError) -> JSONResponse:
    """The answer to a Reef error: a request error's own status, 503 for the log, else 500."""
    if isinstance(exc, RequestError):
        return error_response(request, exc.status, exc.code, exc.message, exc.headers)
    if isinstance(exc, LogUnavailableError | UnknownTopicError):
        logger.warning("event log unavailable: %s", exc)
        return error_response(
            request,
            503,
            "log_unavailable",
            "the event log cannot record right now; nothing was stored",
        )
    logger.error("unexpected Reef error", exc_info=exc)
    return error_response(request, 500, "internal_error", str(exc))


async def _reef_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ReefError)
    return reef_error_response(request, exc)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return error_response(request, exc.status_code, code, str(exc.detail))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return error_response(
        request, 400, "invalid_request", f"{where}: {first.get('msg', 'invalid')}"
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(ReefError, _reef_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
