"""The engine's request-facing core: bounded generation in worker threads, updates.

Generation holds one of ``max_concurrency`` slots and runs in a worker thread (torch
releases the GIL), on the module of the snapshot taken when the slot was granted; the
event loop stays free for health checks and control requests. Updates also run in
worker threads and never wait for generations: they build new weights beside the old
ones and swap (see :mod:`reef.engine.model`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from reef.engine.config import EngineConfig
from reef.engine.errors import WeightLoadError
from reef.engine.generation import Completion, Decoder, Sampling, Step
from reef.engine.group import WeightsUpdateGroup
from reef.engine.loader import context_window, eos_ids
from reef.engine.model import EngineModel, Snapshot
from reef.engine.sampling_defaults import NO_MODEL_DEFAULTS
from reef.engine.tensor_wire import deserialize_named_tensors


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A tokenized request, whatever API it came from."""

    prompt_ids: list[int]
    sampling: Sampling
    #: SGLang's ``lora_path`` (or ``model`` ``<base>:<adapter>``): must be loaded
    adapter: str | None = None
    #: Reef's API routed the exchange to this release (``x-reef-serve-release``)
    release: str | None = None
    top_logprobs: int = 0
    input_logprobs: bool = False


class EngineRuntime:
    """What the routes call: generation (buffered or streamed) and weight updates."""

    def __init__(self, model: EngineModel, config: EngineConfig) -> None:
        self.model = model
        self.config = config
        self.group = WeightsUpdateGroup(device=model.device, timeout_s=config.group_timeout_s)
        self._slots = asyncio.Semaphore(config.max_concurrency)
        base = model.snapshot().base
        self._eos = eos_ids(base, model.tokenizer)
        self._context = context_window(base)
        #: what a request's omitted temperature, top-p and top-k become (before the API's)
        self.sampling_defaults = (
            model.sampling_defaults if config.sampling_defaults == "model" else NO_MODEL_DEFAULTS
        )

    @property
    def tokenizer(self) -> Any:
        return self.model.tokenizer

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` without special tokens (what a response carries)."""
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def token_text(self, token_id: int) -> str:
        """Text of one token, special tokens included (what a logprob entry names)."""
        return str(self.tokenizer.decode([token_id], skip_special_tokens=False))

    def _decoder(self, snapshot: Snapshot, adapter: str | None) -> Decoder:
        module = snapshot.module_for(adapter)
        return Decoder(module, eos_ids=self._eos, context=self._context)

    def _run(
        self,
        request: GenerationRequest,
        snapshot: Snapshot,
        adapter: str | None,
        on_step: Callable[[Step], bool] | None,
    ) -> Completion:
        return self._decoder(snapshot, adapter).generate(
            request.prompt_ids,
            request.sampling,
            decode=self.decode,
            top_logprobs=request.top_logprobs,
            input_logprobs=request.input_logprobs,
            on_step=on_step,
        )

    async def complete(self, request: GenerationRequest) -> tuple[str, Completion]:
        """(weight version, completion), both from one snapshot."""
        async with self._slots:
            snapshot = self.model.snapshot()
            adapter = snapshot.resolve(request.adapter, request.release)
            snapshot.module_for(adapter)  # unknown adapter: fail before the thread
            completion = await asyncio.to_thread(self._run, request, snapshot, adapter, None)
            return snapshot.version_for(adapter), completion

    async def stream(
        self, request: GenerationRequest
    ) -> AsyncIterator[tuple[str, Step | Completion]]:
        """Yields (weight version, step) per token, then (weight version, completion)."""
        async with self._slots:
            snapshot = self.model.snapshot()
            adapter = snapshot.resolve(request.adapter, request.release)
            snapshot.module_for(adapter)
            loop = asyncio.get_running_loop()
            queue: asyncio.Queue[Step | Completion | BaseException] = asyncio.Queue()
            cancelled = threading.Event()

            def on_step(step: Step) -> bool:
                loop.call_soon_threadsafe(queue.put_nowait, step)
                return not cancelled.is_set()

            def run() -> None:
                try:
                    result: Completion | BaseException = self._run(
                        request, snapshot, adapter, on_step
                    )
                except Exception as exc:  # handed to the consumer, re-raised there
                    result = exc
                loop.call_soon_threadsafe(queue.put_nowait, result)

            worker = asyncio.ensure_future(asyncio.to_thread(run))
            try:
                while True:
                    item = await queue.get()
                    if isinstance(item, BaseException):
                        raise item
                    yield snapshot.version_for(adapter), item
                    if isinstance(item, Completion):
                        return
            finally:
                cancelled.set()
                await worker

    # -- updates (each blocking step in a worker thread) -------------------------------

    async def update_from_disk(
        self, path: str, weight_version: str | None, load_format: str | None
    ) -> str:
        call = partial(
            self.model.update_from_disk,
            path,
            weight_version=weight_version,
            load_format=load_format,
        )
        return await asyncio.to_thread(call)

    async def update_from_tensor(self, entries: list[str], weight_version: str | None) -> str:
        """SGLang's colocated update: this rank's entry of ``serialized_named_tensors``,
        unpickled (restricted, :mod:`reef.engine.tensor_wire`), checked, then swapped."""
        if not entries:
            raise WeightLoadError("serialized_named_tensors is empty (one entry per TP rank)")
        named = await asyncio.to_thread(deserialize_named_tensors, entries[0])
        tensors = dict(named)
        if len(tensors) != len(named):
            raise WeightLoadError("names must not repeat")
        call = partial(
            self.model.update_from_tensors,
            tensors,
            weight_version=weight_version,
            exact_dtypes=True,
        )
        return await asyncio.to_thread(call)

    async def update_from_distributed(
        self,
        names: list[str],
        dtypes: list[str],
        shapes: list[list[int]],
        *,
        group_name: str,
        weight_version: str | None,
    ) -> str:
        received = await asyncio.to_thread(self.group.receive, names, dtypes, shapes, group_name)
        tensors: dict[str, torch.Tensor] = dict(received)
        if len(tensors) != len(received):
            raise WeightLoadError("names must not repeat")
        call = partial(self.model.update_from_tensors, tensors, weight_version=weight_version)
        return await asyncio.to_thread(call)
