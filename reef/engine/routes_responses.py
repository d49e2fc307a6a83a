"""OpenAI's Responses API: ``POST /v1/responses`` (buffered and SSE).

The request (``instructions``, ``input`` as a string or items, ``function_call`` and
``function_call_output`` items, function ``tools``) is read into the conversation model
and generated through the same path as chat completions (:mod:`reef.engine.turns`).
The answer is a ``message`` item with ``output_text`` and one ``function_call`` item per
call. Streamed: ``response.created``, ``response.in_progress``, per item
``response.output_item.added``, its deltas (``response.output_text.delta`` or
``response.function_call_arguments.delta``) and their ``.done`` events,
``response.output_item.done``, then ``response.completed`` (``response.incomplete`` when
the token limit cut the answer). Nothing is stored: ``previous_response_id`` is refused.
As on the other routes, the answer names its weights, carries ``meta_info`` when asked
(:func:`reef.engine.turns.token_record`), and ``x-reef-serve-release`` routes it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from reef.core.dialogue.records import conversation_of
from reef.core.routing import SERVE_RELEASE_HEADER
from reef.engine.errors import EngineError
from reef.engine.generation import Completion
from reef.engine.routes_native import runtime_of
from reef.engine.routes_openai import meta_info
from reef.engine.runtime import EngineRuntime, GenerationRequest
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

#: the limit of a request without ``max_output_tokens``: as OpenAI's, the answer runs until
#: the model stops or the context window ends (the decoder caps every budget there), so an
#: agent that sets no limit (Codex) is not cut at the engine's chat default
TO_CONTEXT_END = 1 << 30
#: request keys a response object echoes back
_ECHOED = ("instructions", "tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p")


def _prepared(
    body: dict[str, Any], request: Request, top: int | None
) -> tuple[GenerationRequest, Turn]:
    if body.get("previous_response_id"):
        raise EngineError("previous_response_id: the engine stores no responses; send input")
    if not isinstance(body.get("input"), str | list):
        raise EngineError("input: a string or a list of items is required")
    conversation = conversation_of(body, "/v1/responses")
    if conversation is None:
        raise EngineError("the request carries no input")
    runtime = runtime_of(request)
    turn = turn_of(conversation, runtime, "responses")
    sampling = body_sampling(
        body,
        runtime.sampling_defaults,
        max_new_tokens=token_limit(body, "max_output_tokens", TO_CONTEXT_END),
    )
    generation = GenerationRequest(
        prompt_ids=turn.prompt_ids,
        sampling=sampling,
        adapter=adapter_named(str(body.get("model") or ""), None, runtime),
        release=request.headers.get(SERVE_RELEASE_HEADER) or None,
        top_logprobs=top or 0,
    )
    return generation, turn


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content if status == "completed" else [],
    }


def _call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def _usage(completion: Completion) -> dict[str, Any]:
    prompt, output = len(completion.prompt_ids), len(completion.steps)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + output,
    }


class _Response:
    """One response's identity and its shapes."""

    def __init__(
        self, body: dict[str, Any], runtime: EngineRuntime, version: str, *, record: bool
    ) -> None:
        self.body, self.version, self.record = body, version, record
        self.id = f"resp_{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = str(body.get("model") or runtime.config.model_name)
        self.sequence = 0

    def envelope(self, status: str, output: list[Any]) -> dict[str, Any]:
        echoed = {key: self.body.get(key) for key in _ECHOED}
        echoed["tools"] = echoed["tools"] or []
        echoed["tool_choice"] = echoed["tool_choice"] or "auto"
        echoed["parallel_tool_calls"] = echoed["parallel_tool_calls"] is not False
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": output,
            "error": None,
            "incomplete_details": None,
            "metadata": self.body.get("metadata") or {},
            **echoed,
            "usage": None,
            "weight_version": self.version,
        }

    def buffered(self, answer: Answer) -> dict[str, Any]:
        output: list[Any] = []
        if answer.text or not answer.calls:
            output.append(_message_item(f"msg_{uuid.uuid4().hex}", answer.text, "completed"))
        output += [
            _call_item(f"fc_{uuid.uuid4().hex}", f"call_{uuid.uuid4().hex[:24]}", *c, "completed")
            for c in ((call.name, call.arguments) for call in answer.calls)
        ]
        return self.finished(answer, output)

    def finished(self, answer: Answer, output: list[Any]) -> dict[str, Any]:
        cut = answer.completion.finish_type == "length" and not answer.calls
        response = self.envelope("incomplete" if cut else "completed", output)
        if cut:
            response["incomplete_details"] = {"reason": "max_output_tokens"}
        response["usage"] = _usage(answer.completion)
        if self.record:
            response["meta_info"] = meta_info(self.version, answer.completion)
        return response

    def event(self, kind: str, data: dict[str, Any]) -> bytes:
        payload = orjson.dumps({"type": kind, "sequence_number": self.sequence, **data})
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"

    async def events(self, streamed: AsyncIterator[TextPiece | LastPiece]) -> AsyncIterator[bytes]:
        yield self.event("response.created", {"response": self.envelope("in_progress", [])})
        yield self.event("response.in_progress", {"response": self.envelope("in_progress", [])})
        text = _TextItem(self, f"msg_{uuid.uuid4().hex}")
        async for piece in streamed:
            for frame in text.delta(piece.text):
                yield frame
            if isinstance(piece, LastPiece):
                answer = piece.answer
                if not answer.calls:
                    for frame in text.delta("", force=True):
                        yield frame
                output = [text.done_item()] if text.opened else []
                for frame in text.close():
                    yield frame
                for frame in self._calls(answer, len(output), output):
                    yield frame
                kind = "response.completed"
                final = self.finished(answer, output)
                if final["status"] == "incomplete":
                    kind = "response.incomplete"
                yield self.event(kind, {"response": final})

    def _calls(self, answer: Answer, start: int, output: list[Any]) -> list[bytes]:
        frames = []
        for index, call in enumerate(answer.calls, start):
            item_id, call_id = f"fc_{uuid.uuid4().hex}", f"call_{uuid.uuid4().hex[:24]}"
            added = _call_item(item_id, call_id, call.name, "", "in_progress")
            done = _call_item(item_id, call_id, call.name, call.arguments, "completed")
            at = {"item_id": item_id, "output_index": index}
            frames += [
                self.event("response.output_item.added", {"output_index": index, "item": added}),
                self.event(
                    "response.function_call_arguments.delta", {**at, "delta": call.arguments}
                ),
                self.event(
                    "response.function_call_arguments.done", {**at, "arguments": call.arguments}
                ),
                self.event("response.output_item.done", {"output_index": index, "item": done}),
            ]
            output.append(done)
        return frames


class _TextItem:
    """The streamed ``message`` item: opened by its first text (or at the end, when the
    answer has neither text nor calls), closed once."""

    def __init__(self, response: _Response, item_id: str) -> None:
        self.response, self.id = response, item_id
        self.opened, self.text = False, ""

    def delta(self, text: str, *, force: bool = False) -> list[bytes]:
        frames = []
        if not self.opened and (text or force):
            self.opened = True
            added = _message_item(self.id, "", "in_progress")
            part = {"type": "output_text", "text": "", "annotations": []}
            frames += [
                self.response.event(
                    "response.output_item.added", {"output_index": 0, "item": added}
                ),
                self.response.event("response.content_part.added", {**self._at(), "part": part}),
            ]
        if text:
            self.text += text
            frames.append(
                self.response.event("response.output_text.delta", {**self._at(), "delta": text})
            )
        return frames

    def _at(self) -> dict[str, Any]:
        return {"item_id": self.id, "output_index": 0, "content_index": 0}

    def done_item(self) -> dict[str, Any]:
        return _message_item(self.id, self.text, "completed")

    def close(self) -> list[bytes]:
        if not self.opened:
            return []
        part = {"type": "output_text", "text": self.text, "annotations": []}
        done = {"output_index": 0, "item": self.done_item()}
        return [
            self.response.event("response.output_text.done", {**self._at(), "text": self.text}),
            self.response.event("response.content_part.done", {**self._at(), "part": part}),
            self.response.event("response.output_item.done", done),
        ]


@router.post("/responses", response_model=None)
async def responses(request: Request) -> JSONResponse | StreamingResponse:
    """OpenAI Responses, function tools included (stateless: ``store`` is not kept).
    ``curl --json '{"model": "tiny", "input": "hi", "max_output_tokens": 8}'
    localhost:30000/v1/responses``"""
    body = await json_body(request)
    runtime = runtime_of(request)
    top = token_record(body, request.headers)
    generation, turn = _prepared(body, request, top)
    record = top is not None
    if body.get("stream") is not True:
        version, completion = await runtime.complete(generation)
        answer = answer_of(runtime, generation.sampling, turn, completion)
        response = _Response(body, runtime, version, record=record).buffered(answer)
        return JSONResponse(response, headers={"x-weight-version": version})
    events = runtime.stream(generation)
    version, first = await anext(events)
    streamed = pieces(runtime, generation.sampling, turn, first, events)
    return StreamingResponse(
        _Response(body, runtime, version, record=record).events(streamed),
        media_type="text/event-stream",
        headers={"x-weight-version": version, "cache-control": "no-cache"},
    )
