"""OpenAI-compatible routes: ``/v1/chat/completions`` (buffered and SSE) and ``/v1/models``.

Tools as OpenAI's: ``tools``, ``tool_choice``, ``parallel_tool_calls``; the calls the
engine's tool-call parser finds come back as ``message.tool_calls`` (streamed: one
``delta.tool_calls`` chunk per call, its arguments whole) with finish reason
``tool_calls`` (:mod:`reef.engine.turns` says what each tool choice does).

Every response names the weights that produced it: a top-level ``weight_version`` field
(in every SSE chunk too) and the ``x-weight-version`` header. With ``"logprobs": true``
the body also carries SGLang-style ``meta_info`` (``output_token_logprobs``,
``input_ids``, ``output_ids``, and with ``top_logprobs`` also ``output_top_logprobs``:
``[[logprob, token_id, null], ...]`` per generated token) so a recorder can keep the
exchange token for token.

The adapter is chosen as SGLang's ``OpenAIServingBase._resolve_lora_path`` does:
``model`` ``<base>:<adapter>`` (split on the first colon) first, then the ``lora_path``
field; an adapter so named must be loaded (400 otherwise). Reef's leniency: a ``model``
that is exactly a loaded adapter's name selects it too. Reef's extension: the
``x-reef-serve-release`` header (Reef's API names the release it routed an exchange to,
which the sidecar loads under the release's id) selects that adapter or slot when it is
loaded, and excuses a named adapter equal to it that is not (yet, or any more): the
default weights serve those (:meth:`reef.engine.model.Snapshot.resolve`).
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
from reef.engine.generation import Completion, Step
from reef.engine.protocol import ChatCompletionRequest
from reef.engine.routes_native import runtime_of
from reef.engine.runtime import EngineRuntime, GenerationRequest
from reef.engine.shaping import chat_sampling, token_logprobs, usage
from reef.engine.tool_parsers import ParsedCall
from reef.engine.turns import (
    Answer,
    LastPiece,
    TextPiece,
    Turn,
    adapter_named,
    answer_of,
    pieces,
    turn_of,
)

router = APIRouter(prefix="/v1")

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


def _generation_request(
    body: ChatCompletionRequest, runtime: EngineRuntime, release: str | None = None
) -> tuple[GenerationRequest, Turn]:
    if body.n != 1:
        raise EngineError("the local engine generates one choice per request (n=1)")
    conversation = conversation_of(body.model_dump(exclude_unset=True), "/v1/chat/completions")
    if conversation is None:
        raise EngineError("the request carries no messages")
    turn = turn_of(conversation, runtime, "chat")
    top = body.top_logprobs or 0
    generation = GenerationRequest(
        prompt_ids=turn.prompt_ids,
        sampling=chat_sampling(
            body, runtime.config.default_max_new_tokens, runtime.sampling_defaults
        ),
        adapter=adapter_named(body.model, body.lora_path, runtime),
        release=release or None,
        top_logprobs=top if body.logprobs else 0,
    )
    return generation, turn


def _logprob_entry(runtime: EngineRuntime, step: Step) -> dict[str, Any]:
    text = runtime.token_text(step.token_id)
    return {
        "token": text,
        "logprob": step.logprob,
        "bytes": list(text.encode()),
        "top_logprobs": [
            {"token": (t := runtime.token_text(tid)), "logprob": lp, "bytes": list(t.encode())}
            for tid, lp in step.top
        ],
    }


def meta_info(version: str, completion: Completion) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "output_token_logprobs": token_logprobs(completion, None),
        "input_ids": completion.prompt_ids,
        "output_ids": completion.output_ids,
        "weight_version": version,
        "finish_reason": _FINISH[completion.finish_type],
    }
    if completion.steps and completion.steps[0].top:
        # the top_logprobs asked for, with token ids (SGLang's native shape)
        meta["output_top_logprobs"] = [
            [[lp, token, None] for token, lp in step.top] for step in completion.steps
        ]
    return meta


def _finish(answer: Answer) -> str:
    return "tool_calls" if answer.calls else _FINISH[answer.completion.finish_type]


def _tool_call(call: ParsedCall) -> dict[str, Any]:
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


class _Chat:
    """One chat completion's identity and formatting."""

    def __init__(self, body: ChatCompletionRequest, runtime: EngineRuntime, version: str) -> None:
        self.body, self.runtime, self.version = body, runtime, version
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = body.model or runtime.config.model_name

    def envelope(self, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "weight_version": self.version,
        }

    def buffered(self, answer: Answer) -> dict[str, Any]:
        completion = answer.completion
        message: dict[str, Any] = {"role": "assistant", "content": answer.text}
        if answer.calls:
            message["content"] = answer.text or None
            message["tool_calls"] = [_tool_call(call) for call in answer.calls]
        choice = {
            "index": 0,
            "message": message,
            "logprobs": self._logprobs(completion.steps),
            "finish_reason": _finish(answer),
        }
        body = self.envelope("chat.completion", [choice])
        body["usage"] = dict(usage(completion))
        if self.body.logprobs:
            body["meta_info"] = meta_info(self.version, completion)
        return body

    def _logprobs(self, steps: list[Step]) -> dict[str, Any] | None:
        if not self.body.logprobs:
            return None
        return {"content": [_logprob_entry(self.runtime, step) for step in steps]}

    def chunk(self, delta: dict[str, Any], steps: list[Step], finish: str | None) -> bytes:
        choice = {
            "index": 0,
            "delta": delta,
            "logprobs": self._logprobs(steps) if steps else None,
            "finish_reason": finish,
        }
        return b"data: " + orjson.dumps(self.envelope("chat.completion.chunk", [choice])) + b"\n\n"

    async def frames(self, streamed: AsyncIterator[TextPiece | LastPiece]) -> AsyncIterator[bytes]:
        yield self.chunk({"role": "assistant", "content": ""}, [], None)
        async for piece in streamed:
            if isinstance(piece, TextPiece):
                yield self.chunk({"content": piece.text}, piece.steps, None)
                continue
            pending = piece.steps
            if piece.text or (pending and not piece.answer.calls):
                yield self.chunk({"content": piece.text}, pending, None)
                pending = []
            for index, call in enumerate(piece.answer.calls):
                delta = {"tool_calls": [{"index": index, **_tool_call(call)}]}
                yield self.chunk(delta, pending, None)
                pending = []
            yield self.final_chunk(piece.answer)
        yield b"data: [DONE]\n\n"

    def final_chunk(self, answer: Answer) -> bytes:
        """The last chunk: finish reason, and usage / meta_info when asked for."""
        completion, finish = answer.completion, _finish(answer)
        body = self.envelope(
            "chat.completion.chunk",
            [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}],
        )
        options = self.body.stream_options
        if options is not None and options.include_usage:
            body["usage"] = dict(usage(completion))
        if self.body.logprobs:
            body["meta_info"] = meta_info(self.version, completion)
        return b"data: " + orjson.dumps(body) + b"\n\n"


@router.post("/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest, request: Request
) -> JSONResponse | StreamingResponse:
    """OpenAI chat completions with the chat template applied.
    ``curl --json '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
    "temperature": 0, "max_tokens": 8}' localhost:30000/v1/chat/completions``"""
    runtime = runtime_of(request)
    release = request.headers.get(SERVE_RELEASE_HEADER)
    generation, turn = _generation_request(body, runtime, release)
    if not body.stream:
        version, completion = await runtime.complete(generation)
        chat = _Chat(body, runtime, version)
        answer = answer_of(runtime, generation.sampling, turn, completion)
        return JSONResponse(chat.buffered(answer), headers={"x-weight-version": version})
    events = runtime.stream(generation)
    version, first = await anext(events)
    chat = _Chat(body, runtime, version)
    return StreamingResponse(
        chat.frames(pieces(runtime, generation.sampling, turn, first, events)),
        media_type="text/event-stream",
        headers={"x-weight-version": version, "cache-control": "no-cache"},
    )


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    """The base model and every loaded adapter. ``curl localhost:30000/v1/models``"""
    runtime = runtime_of(request)
    created = int(time.time())
    base = runtime.config.model_name
    data = [
        {
            "id": base,
            "object": "model",
            "created": created,
            "owned_by": "reef",
            "root": runtime.model.model_path,
            "parent": None,
        }
    ]
    data += [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "reef",
            "root": path,
            "parent": base,
        }
        for name, path in runtime.model.loaded_adapters().items()
    ]
    return {"object": "list", "data": data}
