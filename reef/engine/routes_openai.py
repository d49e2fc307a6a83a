"""OpenAI-compatible routes: ``/v1/chat/completions`` (buffered and SSE) and ``/v1/models``.

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
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from reef.core.routing import SERVE_RELEASE_HEADER
from reef.engine.errors import EngineError
from reef.engine.generation import Completion, Step
from reef.engine.protocol import ChatCompletionRequest
from reef.engine.routes_native import runtime_of
from reef.engine.runtime import EngineRuntime, GenerationRequest
from reef.engine.shaping import chat_sampling, token_logprobs, usage, visible_text

router = APIRouter(prefix="/v1")

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


def _adapter(body: ChatCompletionRequest, runtime: EngineRuntime) -> str | None:
    """The adapter the request names, as SGLang reads it (``model`` before ``lora_path``)."""
    _, colon, named = body.model.partition(":")
    if colon and named.strip():
        return named.strip()
    if body.lora_path:
        return body.lora_path
    if body.model and body.model in runtime.model.snapshot().adapters:
        return body.model
    return None


def _prompt_ids(body: ChatCompletionRequest, runtime: EngineRuntime) -> list[int]:
    tokenizer = runtime.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise EngineError("the model's tokenizer has no chat template")
    messages = [{"role": m.role, "content": m.text()} for m in body.messages]
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(encoded, Mapping):
        encoded = encoded["input_ids"]
    return [int(token) for token in encoded]


def _generation_request(
    body: ChatCompletionRequest, runtime: EngineRuntime, release: str | None = None
) -> GenerationRequest:
    if body.n != 1:
        raise EngineError("the local engine generates one choice per request (n=1)")
    top = body.top_logprobs or 0
    return GenerationRequest(
        prompt_ids=_prompt_ids(body, runtime),
        sampling=chat_sampling(body, runtime.config.default_max_new_tokens),
        adapter=_adapter(body, runtime),
        release=release or None,
        top_logprobs=top if body.logprobs else 0,
    )


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


def _meta_info(version: str, completion: Completion) -> dict[str, Any]:
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

    def buffered(self, completion: Completion) -> dict[str, Any]:
        text = visible_text(
            self.runtime.decode(completion.output_ids), chat_sampling(self.body, 0), completion
        )
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": self._logprobs(completion.steps),
            "finish_reason": _FINISH[completion.finish_type],
        }
        body = self.envelope("chat.completion", [choice])
        body["usage"] = dict(usage(completion))
        if self.body.logprobs:
            body["meta_info"] = _meta_info(self.version, completion)
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

    async def frames(
        self, first: Step | Completion, events: AsyncIterator[tuple[str, Step | Completion]]
    ) -> AsyncIterator[bytes]:
        sampling = chat_sampling(self.body, 0)
        yield self.chunk({"role": "assistant", "content": ""}, [], None)
        ids: list[int] = []
        shown, pending = "", []
        item = first
        while isinstance(item, Step):
            ids.append(item.token_id)
            pending.append(item)
            text = visible_text(self.runtime.decode(ids), sampling, None)
            if text.startswith(shown) and len(text) > len(shown):
                yield self.chunk({"content": text[len(shown) :]}, pending, None)
                shown, pending = text, []
            item = (await anext(events))[1]
        completion = item
        text = visible_text(self.runtime.decode(completion.output_ids), sampling, completion)
        if len(text) > len(shown) or pending:
            yield self.chunk({"content": text[len(shown) :]}, pending, None)
        yield self.final_chunk(completion)
        yield b"data: [DONE]\n\n"

    def final_chunk(self, completion: Completion) -> bytes:
        """The last chunk: finish reason, and usage / meta_info when asked for."""
        finish = _FINISH[completion.finish_type]
        body = self.envelope(
            "chat.completion.chunk",
            [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}],
        )
        options = self.body.stream_options
        if options is not None and options.include_usage:
            body["usage"] = dict(usage(completion))
        if self.body.logprobs:
            body["meta_info"] = _meta_info(self.version, completion)
        return b"data: " + orjson.dumps(body) + b"\n\n"


@router.post("/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest, request: Request
) -> JSONResponse | StreamingResponse:
    """OpenAI chat completions with the chat template applied.
    ``curl --json '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
    "temperature": 0, "max_tokens": 8}' localhost:30000/v1/chat/completions``"""
    runtime = runtime_of(request)
    generation = _generation_request(body, runtime, request.headers.get(SERVE_RELEASE_HEADER))
    if not body.stream:
        version, completion = await runtime.complete(generation)
        chat = _Chat(body, runtime, version)
        return JSONResponse(chat.buffered(completion), headers={"x-weight-version": version})
    events = runtime.stream(generation)
    version, first = await anext(events)
    chat = _Chat(body, runtime, version)
    return StreamingResponse(
        chat.frames(first, events),
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
