"""Reading and validating what a client sent: body size, JSON, scenario header, tags."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

import orjson
from fastapi import Request

from reef.core.errors import RequestError
from reef.core.ids import valid_scenario

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


#: deepest nesting of arrays/objects accepted (the body itself is level 1). Every layer a
#: body travels through must hold it with room to spare: Python's parser recurses per
#: level, and the body store's manifest, which wraps the request in levels of its own, is
#: serialized by orjson, which refuses more than 255 levels
MAX_DEPTH: Final = 128
#: a ``\uD800``-``\uDFFF`` escape: a surrogate, which must come in a valid pair
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_object(body: bytes) -> dict[str, Any]:
    """A JSON object (RFC 8259: UTF-8, finite numbers, text), or 400 saying what is wrong.

    Python's parser is laxer than JSON: it takes UTF-16/32 bodies, NaN and Infinity,
    numbers that overflow to infinity and unpaired surrogate escapes, and it recurses
    per nesting level. Such bodies are refused here, before anything is recorded:
    none of them can be written to the log and read back as JSON.
    """
    try:
        value = json.loads(_text(body), parse_constant=_not_json, parse_float=_finite_float)
    except RecursionError as exc:
        raise _invalid(f"nested deeper than {MAX_DEPTH} levels") from exc
    except ValueError as exc:
        raise _invalid(str(exc)) from exc
    if _SURROGATE_ESCAPE.search(body) is not None:
        _check_surrogates(value)
    return _checked(value)


def decoded_object(body: bytes) -> tuple[str, dict[str, Any]]:
    """The body's text and what it holds, for a request Reef relays and records as sent:
    the same checks as :func:`parse_object`, read by orjson, which refuses NaN, numbers
    that overflow and unpaired surrogates itself and reads an agent-sized body in about
    half the json module's time. Its one difference: an integer beyond 64 bits is read
    as the nearest float. The bytes relayed and the text recorded are the client's own,
    so only Reef's own reading of such a number (routing, tags) sees the float."""
    text = _text(body)
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        why = str(exc)
        if why.startswith("depth limit exceeded"):
            why = f"nested deeper than {MAX_DEPTH} levels"
        raise _invalid(why) from exc
    return text, _checked(value)


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(str(exc)) from exc


def _checked(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RequestError(400, "invalid_json", "request body must be a JSON object")
    if deeper_than(value, MAX_DEPTH):
        raise _invalid(f"nested deeper than {MAX_DEPTH} levels")
    return value


def _invalid(why: str) -> RequestError:
    return RequestError(400, "invalid_json", f"request body is not valid JSON: {why}")


def _not_json(literal: str) -> Any:
    raise ValueError(f"{literal} is not a JSON value")


def _finite_float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise ValueError(f"number {literal[:20]} overflows to infinity")
    return number


def deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` levels (iteratively, visiting
    containers only: a body's strings and numbers are never pushed)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        for child in item.values() if type(item) is dict else item:
            if type(child) is dict or type(child) is list:
                stack.append((child, depth + 1))
    return False


def _check_surrogates(value: Any) -> None:
    """400 for a string (key or value) holding an unpaired surrogate escape."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise _invalid("unpaired surrogate escape in a string") from exc


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
