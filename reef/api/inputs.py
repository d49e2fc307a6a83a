"""Reading and validating what a client sent: body size, JSON, scenario header, tags."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from reef.errors import RequestError
from reef.ids import valid_scenario

TAG_PREFIX = "x-reef-tag-"


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing (413) anything over ``limit`` bytes without reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, "body_too_large", f"request body exceeds {limit} bytes")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, "body_too_large", f"request body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_object(body: bytes) -> dict[str, Any]:
    """A JSON object, or 400 saying what is wrong."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(400, "invalid_json", f"request body is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise RequestError(400, "invalid_json", "request body must be a JSON object")
    return value


def scenario_header(request: Request) -> str:
    name = request.headers.get("x-reef-scenario", "").strip()
    if not name:
        raise RequestError(400, "missing_scenario", "the x-reef-scenario header is required")
    return checked_scenario(name)


def checked_scenario(name: str) -> str:
    if not valid_scenario(name):
        raise RequestError(
            400,
            "invalid_scenario",
            "scenario names match [A-Za-z0-9][A-Za-z0-9._-]{0,127}",
        )
    return name


def tags_of(request: Request) -> dict[str, str]:
    """``x-reef-tag-<name>`` headers; names lowercased, empty values dropped."""
    return {
        name[len(TAG_PREFIX) :].lower(): value
        for name, value in request.headers.items()
        if name.lower().startswith(TAG_PREFIX) and value and len(name) > len(TAG_PREFIX)
    }
