"""Anthropic's Messages API: ``/v1/messages`` (buffered and SSE) and ``/v1/messages/count_tokens``.

The request is read into the conversation model (system, content blocks, ``tool_use``
and ``tool_result`` blocks), generated through the same path as chat completions
(:mod:`reef.engine.turns`), and answered with ``text`` and ``tool_use`` blocks;
``stop_reason`` is ``tool_use`` when the answer calls a tool. The stream is Anthropic's
event sequence: ``message_start``, per block ``content_block_start`` /
``content_block_delta`` (``text_delta``, ``input_json_delta``) / ``content_block_stop``,
then ``message_delta`` and ``message_stop``. As the OpenAI routes do, answers name their
weights (``x-weight-version``, a top-level ``weight_version``) and, with Reef's
``"logprobs": true`` or its API's ``x-reef-logprobs`` header, carry SGLang's
``meta_info`` (:func:`reef.engine.turns.token_record`). Reef's API routes a request to a
release with ``x-reef-serve-release``, as on chat completions.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from reef.core.dialogue.model import Conversation
from reef.core.dialogue.records import conversation_of
from reef.core.routing import SERVE_RELEASE_HEADER
from reef.engine.errors import EngineError
from reef.engine.routes_native import runtime_of
from reef.engine.routes_openai import meta_info
from reef.engine.runtime import EngineRuntime, GenerationRequest
from reef.engine.shaping import stops
from reef.engine.turns import (
    Answer,
    LastPiece,
    TextPiece,
    Turn,
    adapter_named,
    answer_of,
    body_sampling,
    json_body,
    pieces,
    token_limit,
    token_record,
    turn_of,
)

router = APIRouter(prefix="/v1")


def _conversation(body: dict[str, Any]) -> Conversation:
    if not isinstance(body.get("messages"), list):
        raise EngineError("messages: a list of messages is required")
    conversation = conversation_of(body, "/v1/messages")
    if conversation is None:
        raise EngineError("the request carries no messages")
    return conversation


def _prepared(
    body: dict[str, Any], request: Request, top: int | None
) -> tuple[GenerationRequest, Turn]:
    runtime = runtime_of(request)
    turn = turn_of(_conversation(body), runtime, "anthropic")
    generation = GenerationRequest(
        prompt_ids=turn.prompt_ids,
        sampling=body_sampling(
            body,
            runtime.sampling_defaults,
            max_new_tokens=token_limit(body, "max_tokens", runtime.config.default_max_new_tokens),
            stop=stops(body.get("stop_sequences")),
        ),
        adapter=adapter_named(str(body.get("model") or ""), None, runtime),
        release=request.headers.get(SERVE_RELEASE_HEADER) or None,
        top_logprobs=top or 0,
    )
    return generation, turn


def _stop(answer: Answer) -> tuple[str, str | None]:
    """``stop_reason`` and ``stop_sequence``."""
    completion = answer.completion
    if answer.calls:
        return "tool_use", None
    if completion.finish_type == "length":
        return "max_tokens", None
    if isinstance(completion.matched, str):
        return "stop_sequence", completion.matched
    return "end_turn", None


def _tool_use(name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": f"toolu_{uuid.uuid4().hex[:24]}",
        "name": name,
        "input": json.loads(arguments),
    }


class _Message:
    """One answer's identity and its Anthropic shapes."""

    def __init__(
        self, body: dict[str, Any], runtime: EngineRuntime, version: str, *, record: bool
    ) -> None:
        self.body, self.version, self.record = body, version, record
        self.id = f"msg_{uuid.uuid4().hex[:24]}"
        self.model = str(body.get("model") or runtime.config.model_name)

    def head(self, content: list[dict[str, Any]], input_tokens: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0},
            "weight_version": self.version,
        }

    def buffered(self, answer: Answer) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": answer.text}]
        if answer.calls and not answer.text:
            content = []
        content += [_tool_use(call.name, call.arguments) for call in answer.calls]
        message = self.head(content, len(answer.completion.prompt_ids))
        message["stop_reason"], message["stop_sequence"] = _stop(answer)
        message["usage"]["output_tokens"] = len(answer.completion.steps)
        if self.record:
            message["meta_info"] = meta_info(self.version, answer.completion)
        return message

    async def events(
        self, prompt: list[int], streamed: AsyncIterator[TextPiece | LastPiece]
    ) -> AsyncIterator[bytes]:
        yield _event("message_start", {"message": self.head([], len(prompt))})
        index, text_open = 0, False
        async for piece in streamed:
            text = piece.text
            if text and not text_open:
                block = {"type": "text", "text": ""}
                yield _event("content_block_start", {"index": 0, "content_block": block})
                text_open = True
            if text:
                delta = {"type": "text_delta", "text": text}
                yield _event("content_block_delta", {"index": 0, "delta": delta})
            if isinstance(piece, LastPiece):
                if text_open:
                    yield _event("content_block_stop", {"index": 0})
                    index = 1
                async for frame in self._last(index, piece.answer):
                    yield frame

    async def _last(self, index: int, answer: Answer) -> AsyncIterator[bytes]:
        for offset, call in enumerate(answer.calls):
            block = {**_tool_use(call.name, call.arguments), "input": {}}
            at = index + offset
            yield _event("content_block_start", {"index": at, "content_block": block})
            delta = {"type": "input_json_delta", "partial_json": call.arguments}
            yield _event("content_block_delta", {"index": at, "delta": delta})
            yield _event("content_block_stop", {"index": at})
        reason, sequence = _stop(answer)
        final: dict[str, Any] = {
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": {"output_tokens": len(answer.completion.steps)},
        }
        if self.record:
            final["meta_info"] = meta_info(self.version, answer.completion)
        yield _event("message_delta", final)
        yield _event("message_stop", {})


def _event(kind: str, data: dict[str, Any]) -> bytes:
    payload = orjson.dumps({"type": kind, **data})
    return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"


@router.post("/messages", response_model=None)
async def messages(request: Request) -> JSONResponse | StreamingResponse:
    """Anthropic messages, tools included.
    ``curl --json '{"model": "tiny", "max_tokens": 8, "messages": [{"role": "user",
    "content": "hi"}]}' localhost:30000/v1/messages``"""
    body = await json_body(request)
    runtime = runtime_of(request)
    top = token_record(body, request.headers)
    generation, turn = _prepared(body, request, top)
    record = top is not None
    if body.get("stream") is not True:
        version, completion = await runtime.complete(generation)
        answer = answer_of(runtime, generation.sampling, turn, completion)
        message = _Message(body, runtime, version, record=record).buffered(answer)
        return JSONResponse(message, headers={"x-weight-version": version})
    events = runtime.stream(generation)
    version, first = await anext(events)
    streamed = pieces(runtime, generation.sampling, turn, first, events)
    return StreamingResponse(
        _Message(body, runtime, version, record=record).events(generation.prompt_ids, streamed),
        media_type="text/event-stream",
        headers={"x-weight-version": version, "cache-control": "no-cache"},
    )


@router.post("/messages/count_tokens")
async def count_tokens(request: Request) -> dict[str, int]:
    """The prompt's token count, tools included.
    ``curl --json '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}'
    localhost:30000/v1/messages/count_tokens``"""
    body = await json_body(request)
    runtime = runtime_of(request)
    return {"input_tokens": len(turn_of(_conversation(body), runtime, "anthropic").prompt_ids)}
