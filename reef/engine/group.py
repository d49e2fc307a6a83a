"""The engine's side of SGLang's weight-update process group (trainer = rank 0).

Protocol, as SGLang and slime run it (see :mod:`reef.engine.broadcast` for rank 0):

1. ``/init_weights_update_group``: join ``init_process_group(backend, tcp://master,
   world_size, rank=rank_offset)``; this blocks until every rank has joined, so the
   route runs it in a worker thread while the trainer joins concurrently.
2. ``/update_weights_from_distributed {names, dtypes, shapes}``: allocate one empty
   tensor per name and ``broadcast(src=0)`` into each, in the given order, while the
   trainer broadcasts the same tensors in the same order. Every announced tensor is
   received even if it will be rejected afterwards, so the trainer never hangs on a
   collective this side skipped.
3. ``/destroy_weights_update_group``: ``destroy_process_group``.

The group is this process's default group (the engine has no other), so there is at
most one at a time. gloo moves CPU tensors, NCCL moves CUDA tensors.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Final

import torch
import torch.distributed as dist

from reef.engine.default_group import forget_failed_join
from reef.engine.errors import WeightsGroupError
from reef.engine.protocol import InitWeightsUpdateGroupReqInput
from reef.modelkit.weights import dtype_from_name

BACKENDS: Final = ("gloo", "nccl")


class WeightsUpdateGroup:
    """This engine's membership of at most one weight-update group."""

    def __init__(self, *, device: torch.device, timeout_s: float) -> None:
        self._device = device
        self._timeout = timedelta(seconds=timeout_s)
        self._lock = threading.Lock()
        self.name: str | None = None
        self.backend: str | None = None

    @contextlib.contextmanager
    def _on_device(self) -> Iterator[None]:
        """CUDA's current device is per thread, and each call may run in another one."""
        if self._device.type == "cuda":
            with torch.cuda.device(self._device):
                yield
        else:
            yield

    def join(self, request: InitWeightsUpdateGroupReqInput) -> None:
        """Blocks until all ``world_size`` ranks have joined (or the timeout)."""
        if request.backend not in BACKENDS:
            raise WeightsGroupError(f"unsupported backend {request.backend!r} (gloo or nccl)")
        if request.backend == "nccl" and self._device.type != "cuda":
            raise WeightsGroupError("the nccl backend needs an engine started with --device cuda")
        with self._lock:
            if self.name is not None or dist.is_initialized():
                raise WeightsGroupError(f"a weight update group ({self.name}) already exists")
            try:
                with self._on_device():
                    dist.init_process_group(
                        request.backend,
                        init_method=f"tcp://{request.master_address}:{request.master_port}",
                        world_size=request.world_size,
                        rank=request.rank_offset,
                        timeout=self._timeout,
                    )
            except (RuntimeError, ValueError) as exc:
                forget_failed_join()
                raise WeightsGroupError(f"cannot join the weight update group: {exc}") from exc
            self.name, self.backend = request.group_name, request.backend

    def _check(self, group_name: str) -> None:
        if self.name is None:
            raise WeightsGroupError("no weight update group: call /init_weights_update_group")
        if group_name != self.name:
            raise WeightsGroupError(
                f"unknown group {group_name!r} (this engine is in {self.name!r})"
            )

    def receive(
        self, names: list[str], dtypes: list[str], shapes: list[list[int]], group_name: str
    ) -> list[tuple[str, torch.Tensor]]:
        """Receive every announced tensor from rank 0, in order (blocking)."""
        if not len(names) == len(dtypes) == len(shapes):
            raise WeightsGroupError("names, dtypes and shapes must have the same length")
        with self._lock:
            self._check(group_name)
            device = torch.device("cpu") if self.backend == "gloo" else self._device
            tensors = [
                (name, torch.empty(shape, dtype=dtype_from_name(dtype), device=device))
                for name, dtype, shape in zip(names, dtypes, shapes, strict=True)
            ]
            try:
                with self._on_device():
                    handles = [dist.broadcast(t, src=0, async_op=True) for _, t in tensors]
                    for handle in handles:
                        if handle is not None:
                            handle.wait()
            except RuntimeError as exc:
                raise WeightsGroupError(f"broadcast failed: {exc}") from exc
            return tensors

    def leave(self, group_name: str) -> None:
        with self._lock:
            self._check(group_name)
            try:
                with self._on_device():
                    dist.destroy_process_group()
            finally:
                self.name = self.backend = None
