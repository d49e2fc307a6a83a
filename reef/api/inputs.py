"""Reading and validating what a client sent: body size, JSON, scenario header, tags."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

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
#: every byte but ``[`` and ``{``: deleting them leaves one byte per array or object opened
_NOT_OPENING: Final = bytes(sorted(set(range(256)) - set(b"[{")))


def parse_object(body: bytes) -> dict[str, Any]:
    """A JSON object (RFC 8259: UTF-8, finite numbers, text), or 400 saying what is wrong.

    Python's parser is laxer than JSON: it takes UTF-16/32 bodies, NaN and Infinity,
    numbers that overflow to infinity and unpaired surrogate escapes, and it recurses
    per nesting level. Such bodies are refused here, before anything is recorded:
    none of them can be written to the log and read back as JSON.
    """
    return decoded_object(body)[1]


def decoded_object(body: bytes) -> tuple[str, dict[str, Any]]:
    """The body's text and the object it holds (:func:`parse_object`'s checks): one
    decode for a caller that keeps the text too."""
    try:
        text = body.decode("utf-8")
        value = json.loads(text, parse_constant=_not_json, parse_float=_finite_float)
    except RecursionError as exc:
        raise _invalid(f"nested deeper than {MAX_DEPTH} levels") from exc
    except ValueError as exc:  # UnicodeDecodeError included
        raise _invalid(str(exc)) from exc
    if not isinstance(value, dict):
        raise RequestError(400, "invalid_json", "request body must be a JSON object")
    surrogates = _SURROGATE_ESCAPE.search(body) is not None
    if surrogates or len(body.translate(None, _NOT_OPENING)) > MAX_DEPTH:
        _check_tree(value, surrogates=surrogates)
    return text, value


def _invalid(why: str) -> RequestError:
    return RequestError(400, "invalid_json", f"request body is not valid JSON: {why}")


def _not_json(literal: str) -> Any:
    raise ValueError(f"{literal} is not a JSON value")


def _finite_float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise ValueError(f"number {literal[:20]} is out of range")
    return number


def _check_tree(value: Any, *, surrogates: bool) -> None:
    """Depth (iteratively) and, when escapes hint at them, unpaired surrogates."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[Any] = [*item.keys(), *item.values()]
        elif isinstance(item, list):
            children = item
        else:
            if surrogates and isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise _invalid("unpaired surrogate escape in a string") from exc
            continue
        if depth > MAX_DEPTH:
            raise _invalid(f"nested deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


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
