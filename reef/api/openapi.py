"""OpenAPI declarations of what routes read by hand from a raw ``Request``.

Most routes parse their body and headers themselves (size limit first, then JSON), so
FastAPI cannot infer them; the route decorators declare them here instead: request body
schemas, the ``x-reef-scenario`` header and the error answers (docs/reference/http.md). They are
documentation only: nothing here validates a request. :func:`finish` adjusts the
generated document once (scenario path parameters, bearer auth, no 422).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from reef.artifacts.lfs import LFS_MEDIA_TYPE

#: the HTTP contract's common rules; reef.core.ids.SCENARIO_NAME is the check
SCENARIO_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"

REEF_ERROR: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
                "message": {"type": "string"},
            },
        }
    },
}
#: the Git LFS batch API answers its own errors as ``{"message": ...}``
LFS_ERROR: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["message"],
    "properties": {"message": {"type": "string"}},
}

_WHY: Final = {
    400: "Bad input (invalid JSON, field or scenario name)",
    401: "No or invalid token",
    403: "The token lacks the scope or may not use the scenario",
    404: "Unknown scenario, release, record or report",
    409: "Conflict",
    413: "Body larger than the configured limit",
    422: "Malformed Git LFS batch request",
    429: "Rate limited",
    503: "The event log (or artifact store) cannot serve right now",
}

SCENARIO_HEADER: Final[dict[str, Any]] = {
    "name": "x-reef-scenario",
    "in": "header",
    "required": True,
    "description": "The scenario (workload) the request belongs to.",
    "schema": {"type": "string", "pattern": SCENARIO_PATTERN},
}

REPORT_BODY: Final[dict[str, Any]] = {
    "type": "object",
    "description": "A score, feedback, or both (neither: 400 empty_report).",
    "properties": {
        "score": {
            "type": "number",
            "description": "Finite; booleans are refused. Optional when feedback is given.",
        },
        "feedback": {"anyOf": [{"type": "string"}, {"type": "object"}]},
        "references": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "metadata": {"type": "object"},
        "agent_record_id": {"type": "string", "minLength": 1, "pattern": r"\S"},
    },
}
CREATE_SCENARIO_BODY: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": SCENARIO_PATTERN},
        "release_id": {"type": "string"},
    },
}
RELEASE_BODY: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["release_id"],
    "properties": {"release_id": {"type": "string", "minLength": 1}},
}
ROLLOUT_BODY: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["release_id", "share"],
    "properties": {
        "release_id": {"type": "string", "minLength": 1, "description": "A pending release."},
        "mode": {"type": "string", "enum": ["canary", "shadow"], "default": "canary"},
        "share": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1,
            "description": "Below 1 for a canary.",
        },
        "min_exchanges": {"type": "integer", "minimum": 1, "default": 100},
        "max_duration_s": {"type": "number", "exclusiveMinimum": 0, "default": 86400},
        "alpha": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "latency_slo_ms": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "Roll back a candidate proven slower than this more often.",
        },
    },
}
LFS_BATCH_BODY: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["operation", "objects"],
    "properties": {
        "operation": {"type": "string", "enum": ["download", "upload"]},
        "transfers": {"type": "array", "items": {"type": "string"}},
        "hash_algo": {"type": "string"},
        "objects": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["oid", "size"],
                "properties": {"oid": {"type": "string"}, "size": {"type": "integer"}},
            },
        },
    },
}


def errors(*statuses: int, schema: dict[str, Any] = REEF_ERROR) -> dict[int | str, Any]:
    """``responses=`` of a route: these error statuses, each with the error body schema."""
    return {
        status: {
            "description": _WHY[status],
            "content": {"application/json": {"schema": schema}},
        }
        for status in statuses
    }


def lfs_errors(*statuses: int) -> dict[int | str, Any]:
    """Errors of the Git LFS routes: LFS's own shape, or Reef's (auth, size, scenario)."""
    either = {"anyOf": [REEF_ERROR, LFS_ERROR]}
    return {
        status: {
            "description": _WHY[status],
            "content": {
                media: {"schema": either} for media in ("application/json", LFS_MEDIA_TYPE)
            },
        }
        for status in statuses
    }


def declare(*, body: dict[str, Any] | None = None, scenario_header: bool = False) -> dict[str, Any]:
    """``openapi_extra=`` of a route: its JSON body and/or its scenario header."""
    extra: dict[str, Any] = {}
    if body is not None:
        extra["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": body}},
        }
    if scenario_header:
        extra["parameters"] = [SCENARIO_HEADER]
    return extra


def finish(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi``: the generated document, adjusted once and cached.

    * ``scenario`` path parameters get the scenario name pattern (the routes check it
      themselves, answering 400 ``invalid_scenario``);
    * FastAPI's 422 "Validation Error" is dropped: Reef answers invalid parameters 400;
    * every route but ``/healthz`` takes a bearer token.
    """

    def build() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(
            title=app.title, version=app.version, routes=app.routes, description=app.description
        )
        for path, operations in document.get("paths", {}).items():
            for operation in operations.values():
                _adjust(path, operation)
        components = document.setdefault("components", {})
        for name in ("HTTPValidationError", "ValidationError"):
            components.get("schemas", {}).pop(name, None)
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        app.openapi_schema = document
        return document

    return build


def _adjust(path: str, operation: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", []):
        if parameter.get("in") == "path" and parameter.get("name") == "scenario":
            parameter["schema"] = {**parameter.get("schema", {}), "pattern": SCENARIO_PATTERN}
    responses = operation.get("responses", {})
    if responses.get("422", {}).get("description") == "Validation Error":
        responses.pop("422")
    if path != "/healthz":
        operation["security"] = [{"bearer": []}]
