"""SGLang's native HTTP API: health, model info, weight updates, LoRA, ``/generate``.

Control routes answer SGLang's shapes: ``{success, message}`` (plus
``num_paused_requests`` for disk updates) or ``{success, error_message,
loaded_adapters}`` for LoRA, with status 200 on success and 400 on failure.

``/update_weights_from_tensor`` unpickles its payload (a restricted unpickler, see
:mod:`reef.engine.tensor_wire`) and so answers loopback callers only (403 otherwise);
the other control routes have no authentication of their own and rely on the engine
being bound to loopback (``--host``, default 127.0.0.1). ``flush_cache`` and
``abort_all_requests`` are accepted and change nothing: no cache outlives a request,
and requests in flight finish on the weights they started with.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, Final, cast

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from reef.core.routing import SERVE_RELEASE_HEADER
from reef.engine.errors import EngineError
from reef.engine.generation import Completion, Sampling
from reef.engine.protocol import (
    DestroyWeightsUpdateGroupReqInput,
    GenerateReqInput,
    InitWeightsUpdateGroupReqInput,
    LoadLoRAAdapterReqInput,
    UnloadLoRAAdapterReqInput,
    UpdateWeightFromDiskReqInput,
    UpdateWeightsFromDistributedReqInput,
    UpdateWeightsFromTensorReqInput,
)
from reef.engine.runtime import EngineRuntime, GenerationRequest
from reef.engine.shaping import native_meta_info, native_sampling, visible_text

router = APIRouter()

#: what ``/update_weights_from_tensor`` reads: SGLang's default (model ``load_weights``) and
#: ``direct`` (named parameters copied as they are) mean the same here; SGLang's
#: ``flattened_bucket`` (one flat tensor plus its own metadata class) is refused
TENSOR_LOAD_FORMATS: Final = (None, "direct")


def is_loopback(request: Request) -> bool:
    """The caller connected from this machine's loopback interface."""
    if request.client is None:
        return False
    try:
        address = ipaddress.ip_address(request.client.host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


FLUSH_CACHE_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)


def runtime_of(request: Request) -> EngineRuntime:
    return cast(EngineRuntime, request.app.state.runtime)


def _outcome(success: bool, message: str, **extra: Any) -> JSONResponse:
    body = {"success": success, "message": message, **extra}
    return JSONResponse(body, status_code=200 if success else 400)


def _lora_outcome(runtime: EngineRuntime, error: str | None) -> JSONResponse:
    body = {
        "success": error is None,
        "error_message": error,
        "loaded_adapters": runtime.model.loaded_adapters(),
    }
    return JSONResponse(body, status_code=200 if error is None else 400)


@router.get("/health")
async def health() -> Response:
    """The process is up. ``curl -i localhost:30000/health``"""
    return Response(status_code=200)


@router.get("/health_generate")
async def health_generate(request: Request) -> Response:
    """The model generates one token. ``curl -i localhost:30000/health_generate``"""
    runtime = runtime_of(request)
    ids = runtime.tokenizer.encode("hi")
    await runtime.complete(GenerationRequest(ids, Sampling(max_new_tokens=1, temperature=0.0)))
    return Response(status_code=200)


@router.get("/get_model_info")
async def get_model_info(request: Request) -> dict[str, Any]:
    """SGLang's model info. ``curl localhost:30000/get_model_info``"""
    runtime = runtime_of(request)
    return {
        "model_path": runtime.model.model_path,
        "tokenizer_path": runtime.model.model_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": runtime.model.weight_version,
        "has_image_understanding": False,
        "has_audio_understanding": False,
    }


@router.api_route("/flush_cache", methods=["GET", "POST"])
async def flush_cache() -> PlainTextResponse:
    """No prefix cache outlives a request here; answers as SGLang does.
    ``curl -X POST localhost:30000/flush_cache``"""
    return PlainTextResponse(FLUSH_CACHE_TEXT)


@router.post("/update_weights_from_disk")
async def update_weights_from_disk(
    body: UpdateWeightFromDiskReqInput, request: Request
) -> JSONResponse:
    """Load full weights from a folder (Reef's extension: a PEFT adapter folder becomes the
    default adapter; Reef's sidecar loads adapters by ``/load_lora_adapter``).

        curl --json '{"model_path": "/ckpt/v2", "weight_version": "v2"}' \\
            localhost:30000/update_weights_from_disk
    """
    runtime = runtime_of(request)
    try:
        message = await runtime.update_from_disk(
            body.model_path, body.weight_version, body.load_format
        )
    except EngineError as exc:
        return _outcome(False, f"Failed to update weights: {exc}", num_paused_requests=0)
    return _outcome(True, message, num_paused_requests=0)


@router.post("/update_weights_from_tensor")
async def update_weights_from_tensor(
    body: UpdateWeightsFromTensorReqInput, request: Request
) -> JSONResponse:
    """Swap in named tensors handed over by a process on this machine (SGLang's colocated
    update); loopback callers only, since the payload is unpickled.

        curl --json '{"serialized_named_tensors": ["<base64>"], "weight_version": "v4"}' \\
            localhost:30000/update_weights_from_tensor
    """
    if not is_loopback(request):
        return JSONResponse(
            {"success": False, "message": "update_weights_from_tensor: loopback callers only"},
            status_code=403,
        )
    if body.load_format not in TENSOR_LOAD_FORMATS:
        formats = ", ".join(str(f) for f in TENSOR_LOAD_FORMATS)
        return _outcome(False, f"unsupported load_format {body.load_format!r} (use {formats})")
    runtime = runtime_of(request)
    try:
        message = await runtime.update_from_tensor(
            body.serialized_named_tensors, body.weight_version
        )
    except EngineError as exc:
        return _outcome(False, f"Failed to update weights: {exc}")
    return _outcome(True, message)


@router.post("/init_weights_update_group")
async def init_weights_update_group(
    body: InitWeightsUpdateGroupReqInput, request: Request
) -> JSONResponse:
    """Join the trainer's group (blocks until every rank joined).
    ``curl --json '{"master_address": "10.0.0.1", "master_port": 29500, "rank_offset": 1,
    "world_size": 2, "backend": "gloo"}' localhost:30000/init_weights_update_group``"""
    runtime = runtime_of(request)
    try:
        await asyncio.to_thread(runtime.group.join, body)
    except EngineError as exc:
        return _outcome(False, f"Failed to init process group: {exc}")
    return _outcome(True, "Succeeded to initialize custom process group.")


@router.post("/update_weights_from_distributed")
async def update_weights_from_distributed(
    body: UpdateWeightsFromDistributedReqInput, request: Request
) -> JSONResponse:
    """Receive the announced tensors from rank 0, then swap them in.
    ``curl --json '{"names": ["lm_head.weight"], "dtypes": ["float32"], "shapes": [[68, 64]],
    "weight_version": "v3"}' localhost:30000/update_weights_from_distributed``"""
    runtime = runtime_of(request)
    try:
        message = await runtime.update_from_distributed(
            body.names,
            body.dtypes,
            body.shapes,
            group_name=body.group_name,
            weight_version=body.weight_version,
        )
    except EngineError as exc:
        return _outcome(False, f"Failed to update weights: {exc}")
    return _outcome(True, message)


@router.post("/destroy_weights_update_group")
async def destroy_weights_update_group(
    body: DestroyWeightsUpdateGroupReqInput, request: Request
) -> JSONResponse:
    """Leave the group.

    curl --json '{"group_name": "weight_update_group"}' localhost:30000/destroy_weights_update_group
    """
    runtime = runtime_of(request)
    try:
        await asyncio.to_thread(runtime.group.leave, body.group_name)
    except EngineError as exc:
        return _outcome(False, f"Failed to destroy process group: {exc}")
    return _outcome(True, "Succeeded to destroy custom process group.")


@router.post("/load_lora_adapter")
async def load_lora_adapter(body: LoadLoRAAdapterReqInput, request: Request) -> JSONResponse:
    """Load a named adapter (a PEFT folder, or with Reef's engine a full-weights folder).

    curl --json '{"lora_name": "a", "lora_path": "/ckpt/a"}' localhost:30000/load_lora_adapter
    """
    runtime = runtime_of(request)
    load = partial(
        runtime.model.load_adapter,
        body.lora_name,
        body.lora_path,
        pinned=body.pinned,
        weight_version=body.weight_version,
    )
    try:
        await asyncio.to_thread(load)
    except EngineError as exc:
        return _lora_outcome(runtime, str(exc))
    return _lora_outcome(runtime, None)


@router.post("/unload_lora_adapter")
async def unload_lora_adapter(body: UnloadLoRAAdapterReqInput, request: Request) -> JSONResponse:
    """Unload a named adapter.

    curl --json '{"lora_name": "a"}' localhost:30000/unload_lora_adapter
    """
    runtime = runtime_of(request)
    try:  # waits for an update in progress: off the event loop
        await asyncio.to_thread(runtime.model.unload_adapter, body.lora_name)
    except EngineError as exc:
        return _lora_outcome(runtime, str(exc))
    return _lora_outcome(runtime, None)


def _generation_request(
    body: GenerateReqInput, runtime: EngineRuntime, release: str | None
) -> GenerationRequest:
    if isinstance(body.text, list) or (body.input_ids and isinstance(body.input_ids[0], list)):
        raise EngineError("batched /generate requests are not supported by the local engine")
    if body.input_ids is not None:
        ids = cast(list[int], body.input_ids)
    elif body.text is not None:
        ids = list(runtime.tokenizer.encode(body.text))
    else:
        raise EngineError("either text or input_ids must be given")
    return GenerationRequest(
        prompt_ids=ids,
        sampling=native_sampling(body.sampling_params, runtime.config.default_max_new_tokens),
        adapter=body.lora_path,
        release=release or None,
        top_logprobs=body.top_logprobs_num if body.return_logprob else 0,
        input_logprobs=body.return_logprob,
    )


def _body(
    body: GenerateReqInput,
    runtime: EngineRuntime,
    rid: str,
    version: str,
    sampling: Sampling,
    completion: Completion,
    started: float,
    final: bool,
) -> dict[str, Any]:
    text = visible_text(
        runtime.decode(completion.output_ids), sampling, completion if final else None
    )
    meta = native_meta_info(
        rid,
        version,
        completion,
        return_logprob=body.return_logprob,
        top_logprobs_num=body.top_logprobs_num,
        token_text=runtime.token_text if body.return_text_in_logprobs else None,
        latency_s=time.monotonic() - started,
    )
    if not final:
        meta["finish_reason"] = None
    return {"text": text, "output_ids": completion.output_ids, "meta_info": meta}


@router.post("/generate", response_model=None)
async def generate(body: GenerateReqInput, request: Request) -> JSONResponse | StreamingResponse:
    """Generate from text or token ids; ``meta_info.weight_version`` names the weights used.
    ``curl --json '{"text": "hello", "sampling_params": {"max_new_tokens": 8, "temperature": 0},
    "return_logprob": true}' localhost:30000/generate``"""
    runtime = runtime_of(request)
    started = time.monotonic()
    rid = body.rid or uuid.uuid4().hex
    generation = _generation_request(body, runtime, request.headers.get(SERVE_RELEASE_HEADER))
    if not body.stream:
        version, completion = await runtime.complete(generation)
        sampling = generation.sampling
        return JSONResponse(_body(body, runtime, rid, version, sampling, completion, started, True))

    events = runtime.stream(generation)
    version, first = await anext(events)

    async def frames() -> AsyncIterator[bytes]:
        partial_completion = Completion(prompt_ids=generation.prompt_ids)
        item: Any = first
        while True:
            final = isinstance(item, Completion)
            if final:
                partial_completion = item
            else:
                partial_completion.steps.append(item)
            chunk = _body(
                body, runtime, rid, version, generation.sampling, partial_completion, started, final
            )
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
            if final:
                break
            item = (await anext(events))[1]
        yield b"data: [DONE]\n\n"

    return StreamingResponse(
        frames(), media_type="text/event-stream", headers={"x-weight-version": version}
    )
