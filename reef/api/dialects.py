"""What differs between the provider dialects: error shapes, usage, stream terminals.

Pure functions over bytes and JSON; the routes decide when to call them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from reef.core.cost import NO_USAGE, Usage

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}
_OPENAI_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


#: a Responses stream's last event, whichever way the response ended
RESPONSES_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class Dialect(StrEnum):
    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    REEF = "reef"


def dialect_of_path(path: str) -> Dialect:
    """Which error shape a route answers in."""
    if path.startswith("/v1/messages"):
        return Dialect.ANTHROPIC
    if path.startswith("/v1/"):
        return Dialect.OPENAI
    return Dialect.REEF


def error_body(dialect: Dialect, status: int, code: str, message: str) -> dict[str, Any]:
    """The JSON error each dialect's official SDK expects."""
    if dialect is Dialect.ANTHROPIC:
        kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    if dialect is Dialect.OPENAI:
        kind = _OPENAI_ERROR_TYPES.get(
            status, "invalid_request_error" if status < 500 else "api_error"
        )
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return {"error": {"code": code, "message": message}}


def usage_of(body: dict[str, Any]) -> Usage:
    """The usage of a buffered response of any dialect (the counts it reports).

    OpenAI chat (``prompt_tokens``, ``prompt_tokens_details.cached_tokens``) and Responses
    (``input_tokens``, ``input_tokens_details.cached_tokens``) count cached prompt tokens
    in the input; Anthropic (``input_tokens``, ``cache_read_input_tokens``,
    ``cache_creation_input_tokens``) does not (:mod:`reef.core.cost`).
    """
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return NO_USAGE
    if "prompt_tokens" in usage:  # chat completions
        return Usage(
            _int_or_none(usage.get("prompt_tokens")),
            _int_or_none(usage.get("completion_tokens")),
            _cached(usage.get("prompt_tokens_details")),
            input_includes_cached=True,
        )
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
        return _anthropic_usage(usage)
    details = usage.get("input_tokens_details")
    return Usage(
        _int_or_none(usage.get("input_tokens")),
        _int_or_none(usage.get("output_tokens")),
        _cached(details),
        # Responses reports the details; an Anthropic usage without cache fields read
        # nothing from the cache, so either way of counting gives the same split
        input_includes_cached=isinstance(details, dict),
    )


def _anthropic_usage(usage: dict[str, Any]) -> Usage:
    creation = usage.get("cache_creation")
    return Usage(
        _int_or_none(usage.get("input_tokens")),
        _int_or_none(usage.get("output_tokens")),
        _int_or_none(usage.get("cache_read_input_tokens")),
        _int_or_none(usage.get("cache_creation_input_tokens")),
        cache_write_1h_tokens=_int_or_none(creation.get("ephemeral_1h_input_tokens"))
        if isinstance(creation, dict)
        else None,
    )


def _cached(details: Any) -> int | None:
    return _int_or_none(details.get("cached_tokens")) if isinstance(details, dict) else None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# -- server-sent events -----------------------------------------------------------------


@dataclass(slots=True)
class SseEvent:
    """One SSE event block as received, with its parsed ``event:`` name and ``data:``."""

    raw: bytes
    name: str | None
    data: str | None

    def json(self) -> Any:
        if self.data is None:
            return None
        try:
            return json.loads(self.data)
        except ValueError:
            return None


def parse_event(raw: bytes) -> SseEvent:
    name: str | None = None
    data_lines: list[str] = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data_lines.append(line[5:].lstrip(" ") if line[5:6] == " " else line[5:])
    return SseEvent(raw, name, "\n".join(data_lines) if data_lines else None)


class SseSplitter:
    """Splits a byte stream into complete SSE event blocks (CRLFCRLF, LFLF or CRCR)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        blocks: list[bytes] = []
        while True:
            cut = _find_boundary(self._buffer)
            if cut is None:
                return blocks
            end, sep_len = cut
            blocks.append(self._buffer[: end + sep_len])
            self._buffer = self._buffer[end + sep_len :]

    def rest(self) -> bytes:
        return self._buffer


def _find_boundary(buffer: bytes) -> tuple[int, int] | None:
    found = [(buffer.find(sep), len(sep)) for sep in (b"\r\n\r\n", b"\n\n", b"\r\r")]
    hits = [(i, n) for i, n in found if i >= 0]
    return min(hits) if hits else None


def encode_event(name: str | None, data: Any) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


@dataclass(slots=True)
class StreamAssembly:
    """What a relayed stream said, accumulated for the record."""

    text: list[str] = field(default_factory=list)
    usage: Usage = NO_USAGE
    first_chunk: dict[str, Any] | None = None
    final_response: dict[str, Any] | None = None
    raw: list[bytes] = field(default_factory=list)

    def observe(self, event: SseEvent) -> None:
        self.raw.append(event.raw)
        payload = event.json()
        if not isinstance(payload, dict):
            return
        kind = payload.get("type") or event.name
        if payload.get("object") == "chat.completion.chunk":
            self._openai_chunk(payload)
        elif kind == "message_start":  # its output count is a placeholder: the delta's counts
            self._anthropic_usage(payload.get("message", {}).get("usage"), outputs=False)
        elif kind == "content_block_delta":
            delta = payload.get("delta", {})
            if isinstance(delta.get("text"), str):
                self.text.append(delta["text"])
        elif kind == "message_delta":
            self._anthropic_usage(payload.get("usage"))
        elif kind == "response.output_text.delta" and isinstance(payload.get("delta"), str):
            self.text.append(payload["delta"])
        elif kind in RESPONSES_FINAL and isinstance(payload.get("response"), dict):
            self.final_response = payload["response"]
            self.usage = usage_of(payload["response"])

    def _anthropic_usage(self, usage: Any, *, outputs: bool = True) -> None:
        """message_start's usage, then message_delta's: a count the later one reports
        replaces the earlier one (the delta's counts are the final, cumulative ones)."""
        if not isinstance(usage, dict):
            return
        update = _anthropic_usage(usage)
        previous = self.usage
        self.usage = Usage(
            _first(update.input_tokens, previous.input_tokens),
            _first(update.output_tokens if outputs else None, previous.output_tokens),
            _first(update.cache_read_tokens, previous.cache_read_tokens),
            _first(update.cache_write_tokens, previous.cache_write_tokens),
            cache_write_1h_tokens=_first(
                update.cache_write_1h_tokens, previous.cache_write_1h_tokens
            ),
        )

    def _openai_chunk(self, chunk: dict[str, Any]) -> None:
        if self.first_chunk is None:
            self.first_chunk = chunk
        for choice in chunk.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if isinstance(content, str):
                self.text.append(content)
        if isinstance(chunk.get("usage"), dict):
            self.usage = usage_of(chunk)

    def record_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "stream": True,
            "message": {"role": "assistant", "content": "".join(self.text)},
            "sse": b"".join(self.raw).decode("utf-8", errors="replace"),
        }
        if self.final_response is not None:
            body["response"] = self.final_response
        return body


def _first(*counts: int | None) -> int | None:
    return next((c for c in counts if c is not None), None)


def is_terminal(route: str, event: SseEvent) -> bool:
    """The protocol's last event: the receipt goes with it, after the record is stored."""
    if route == "/v1/chat/completions":
        return event.data is not None and event.data.strip() == "[DONE]"
    payload = event.json()
    kind = (payload.get("type") if isinstance(payload, dict) else None) or event.name
    if route == "/v1/messages":
        return kind == "message_stop"
    if route == "/v1/responses":
        return kind in RESPONSES_FINAL
    return False


def receipt_frames(route: str, terminal: SseEvent, assembly: StreamAssembly, receipt: str) -> bytes:
    """The bytes that replace the terminal event: receipt first (OpenAI) or folded in."""
    reef = {"agent_record_id": receipt}
    if route == "/v1/chat/completions":
        first = assembly.first_chunk or {}
        chunk: dict[str, Any] = {"object": "chat.completion.chunk"}
        for key in ("id", "created", "model", "system_fingerprint", "service_tier"):
            if key in first:
                chunk[key] = first[key]
        chunk["choices"] = []
        chunk["reef"] = reef
        return encode_event(None, chunk) + terminal.raw
    payload = terminal.json()
    if not isinstance(payload, dict):
        payload = {"type": terminal.name}
    return encode_event(terminal.name, {**payload, "reef": reef})
