"""Where a candidate trains: device, compute dtype, seeded RNG, micro-batches by token
budget, and running out of device memory as a failed candidate.

Imported only when a recipe trains or evaluates (it imports torch). The settings are a
recipe's ``training`` section (:class:`recipes.training.DeviceSettings`); the device is
resolved by the pure :func:`recipes.training.resolve_device`.

- **dtype**: the weights and the optimiser state stay float32; ``bfloat16`` runs the
  forward and backward passes under autocast (the default on a GPU).
- **micro-batches**: an optimiser step's examples are cut, in order, into micro-batches
  of at most ``micro_batch_tokens`` padded tokens; each loss is normalised by the step's
  token count, so the accumulated gradient is the full batch's.
- **out of memory**: :func:`guarded` turns ``torch.OutOfMemoryError`` into a
  :class:`~recipes.errors.TrainingError` (the trainer records that candidate as failed
  and goes on) after the failed call's tensors are freed and the CUDA cache emptied.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from recipes.errors import RecipeError
from recipes.training import DeviceSettings, resolve_device

T = TypeVar("T")


def cuda_count() -> int:
    """GPUs torch can use here (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def compute_dtype(setting: str, device: torch.device) -> torch.dtype:
    """``training.dtype`` on ``device``: ``auto`` is bfloat16 on a GPU, else float32."""
    if setting == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return torch.bfloat16 if setting == "bfloat16" else torch.float32


@dataclass(frozen=True, slots=True)
class Placement:
    """The resolved device and compute dtype of one training or evaluation run."""

    device: torch.device
    dtype: torch.dtype

    @classmethod
    def of(cls, device: str, dtype: str = "auto") -> Placement:
        resolved = torch.device(resolve_device(device, cuda_count()))
        return cls(resolved, compute_dtype(dtype, resolved))

    @classmethod
    def of_settings(cls, settings: DeviceSettings) -> Placement:
        return cls.of(settings.device, settings.dtype)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The block's matmuls in the compute dtype (nothing to do for float32)."""
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    @contextlib.contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        """Run the block from ``seed`` on the CPU and on this device; the callers' RNG
        states are restored after."""
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            yield


def micro_batches(lengths: Sequence[int], budget: int) -> list[range]:
    """Consecutive index ranges whose padded size (rows x longest row) stays within
    ``budget`` tokens; a row longer than the budget is a micro-batch of its own."""
    found: list[range] = []
    start, longest = 0, 0
    for index, length in enumerate(lengths):
        wider = max(longest, length)
        if index > start and wider * (index + 1 - start) > budget:
            found.append(range(start, index))
            start, wider = index, length
        longest = wider
    if len(lengths) > start:
        found.append(range(start, len(lengths)))
    return found


def enable_checkpointing(model: Any) -> None:
    """Recompute each decoder layer's activations in the backward pass (transformers'
    non-reentrant checkpointing: an adapter's frozen inputs need no gradient)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def guarded(call: Callable[[], T], error: type[RecipeError], what: str) -> T:
    """``call()``; running out of memory raises ``error`` (a failed candidate or
    evaluation) once the call's tensors are freed and the device cache is emptied."""
    try:
        return call()
    except torch.OutOfMemoryError as exc:
        detail = (str(exc).strip().splitlines() or ["out of memory"])[0]
    # out of the except block: the traceback, and the model its frames held, are gone
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    raise error(
        f"{what} ran out of device memory ({detail}); lower training.micro_batch_tokens "
        "or turn on training.gradient_checkpointing"
    )
