"""The attributes of an exchange's span, after the OpenTelemetry GenAI semantic conventions.

Names follow the GenAI conventions as of semantic conventions 1.37+ (the Python
package ``opentelemetry-semantic-conventions`` 0.66b2 ships them; the GenAI group has
since moved to its own repository, semantic-conventions-genai): the provider is
``gen_ai.provider.name``, which replaced the deprecated ``gen_ai.system``. An inference
span is named ``{gen_ai.operation.name} {gen_ai.request.model}`` and is of kind CLIENT.
Reef's own facts ride beside them under ``reef.*``.

Pure: a record and the provider's parsed answer in, a flat attribute mapping out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from reef.core.events import InferenceRecorded

OPERATION: Final = "gen_ai.operation.name"
PROVIDER: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_ID: Final = "gen_ai.response.id"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
ERROR_TYPE: Final = "error.type"

RECEIPT: Final = "reef.receipt_id"
RELEASE: Final = "reef.release_id"
SERVED_RELEASE: Final = "reef.served_release_id"
SCENARIO: Final = "reef.scenario"
REPORT: Final = "reef.report_id"
REFERENCES: Final = "reef.report.references"
SCORE: Final = "reef.report.score"
SAMPLE: Final = "reef.sample_id"
SAMPLES: Final = "reef.train.samples"
REJECTED: Final = "reef.train.rejected"

#: the operation each recorded route performs (well-known values where one fits)
OPERATIONS: Final = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "chat",
    "/v1/messages": "chat",
    "/v1/messages/count_tokens": "count_tokens",
}

Attributes = dict[str, str | int | float | bool | list[str]]


def span_name(route: str, model: str | None) -> str:
    operation = OPERATIONS.get(route, "chat")
    return f"{operation} {model}" if model else operation


def request_attributes(
    route: str, provider: str, *, scenario: str, receipt: str, release: str, model: str | None
) -> Attributes:
    """What is known once the exchange is bound to its scenario and release."""
    attributes: Attributes = {
        OPERATION: OPERATIONS.get(route, "chat"),
        PROVIDER: provider,
        SCENARIO: scenario,
        RECEIPT: receipt,
        RELEASE: release,
    }
    if model:
        attributes[REQUEST_MODEL] = model
    return attributes


def response_attributes(record: InferenceRecorded, answer: Mapping[str, Any] | None) -> Attributes:
    """What the recorded exchange adds: usage, the answering model and id, the served release.

    ``answer`` is the provider's parsed body (buffered), or its first chunk / final
    response object (streamed); the id and model are read from it when it has them.
    """
    attributes: Attributes = {}
    if record.input_tokens is not None:
        attributes[INPUT_TOKENS] = record.input_tokens
    if record.output_tokens is not None:
        attributes[OUTPUT_TOKENS] = record.output_tokens
    if record.served_release_id:
        attributes[SERVED_RELEASE] = record.served_release_id
    identity = _identity(answer)
    for name, value in zip((RESPONSE_ID, RESPONSE_MODEL), identity, strict=True):
        if value:
            attributes[name] = value
    if not record.complete:
        attributes[ERROR_TYPE] = "incomplete"
    elif record.status >= 400:
        attributes[ERROR_TYPE] = str(record.status)
    return attributes


def _identity(answer: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    """(response id, response model); Anthropic's stream start nests them in ``message``."""
    if answer is None:
        return None, None
    inner = answer.get("message")
    source = inner if isinstance(inner, Mapping) and "id" in inner else answer
    return _text(source.get("id")), _text(source.get("model"))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
