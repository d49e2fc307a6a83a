"""SGLang's ``/update_weights_from_tensor`` payload: named tensors, pickled, base64.

What SGLang defines (sgl-project/sglang, read at commit 001067ff
``python/sglang/srt/managers/io_struct.py`` ``UpdateWeightsFromTensorReqInput``; the
``MultiprocessingSerializer`` of ``python/sglang/srt/utils/common.py``; the scheduler's
``update_weights_from_tensor`` in its TP workers): ``serialized_named_tensors`` holds one
entry per TP rank, each ``base64(ForkingPickler.dumps([(name, tensor), ...]))``; rank
*r* unpickles entry *r*. Reef's engine is one rank and reads entry 0.

What travels for a tensor depends on where it lives:

* **CUDA tensors** go through torch's own ``ForkingPickler`` reduction: a CUDA IPC handle
  (``rebuild_cuda_tensor``), so the bytes never leave the device. This is the colocated
  path of slime and SGLang, and what :func:`serialize_named_tensors` sends for them.
  Not exercised here (no GPU in CI).
* **CPU tensors**: torch's reduction would move the storage to shared memory and send a
  file descriptor through the sender's ``multiprocessing.resource_sharer`` socket, which
  only a process sharing the sender's multiprocessing auth key may collect (a child of
  the same launcher, as SGLang's own processes are); a sidecar and an engine started
  separately are refused ("digest received was wrong"). So :func:`serialize_named_tensors`
  sends a CPU tensor as its bytes, dtype and shape (:func:`rebuild_cpu_tensor`): a Reef
  form that real SGLang (GPU-only) would not read, and that needs no shared process.
  The engine also reads torch's shared-memory form when its sender can hand it over.

Not read: SGLang's ``flattened_bucket`` load format (one flat tensor plus SGLang's own
``FlattenedTensorMetadata`` class; the route refuses it before unpickling), and CUDA
payloads from a sender that applied SGLang's ``monkey_patch_torch_reductions`` (its
rebuild function lives in SGLang's package, which this unpickler does not resolve):
senders use torch's stock reduction, as :func:`serialize_named_tensors` does.

Unpickling runs code, so :func:`deserialize_named_tensors` uses an unpickler that
resolves only the globals these two forms need (torch's rebuild functions, tensor and
storage classes, dtypes, and :func:`rebuild_cpu_tensor`) and refuses anything else; the
route that calls it also accepts loopback callers only. Every tensor read is copied into
memory the engine owns, so a sender that later writes into its own tensors (an
optimizer step) or frees them cannot change what the engine serves.
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
from collections.abc import Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any, Final

import torch
import torch.multiprocessing.reductions  # torch's ForkingPickler reductions, by name

from reef.engine.errors import WeightLoadError
from reef.modelkit.weights import dtype_from_name, dtype_name

NamedTensors = list[tuple[str, torch.Tensor]]

_REDUCTIONS: Final = "torch.multiprocessing.reductions"
_ALLOWED: Final = frozenset(
    {
        (_REDUCTIONS, "rebuild_tensor"),
        (_REDUCTIONS, "rebuild_cuda_tensor"),
        (_REDUCTIONS, "rebuild_typed_storage"),
        (_REDUCTIONS, "rebuild_typed_storage_child"),
        (_REDUCTIONS, "rebuild_storage_fd"),
        (_REDUCTIONS, "rebuild_storage_filename"),
        (_REDUCTIONS, "rebuild_storage_empty"),
        ("multiprocessing.resource_sharer", "DupFd"),
        ("torch", "Tensor"),
        ("torch", "Size"),
        ("torch.storage", "UntypedStorage"),
        ("torch.nn.parameter", "Parameter"),
        (__name__, "rebuild_cpu_tensor"),
    }
)


def rebuild_cpu_tensor(data: bytes, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A CPU tensor from its bytes (the receiving side of :class:`_Pickler`'s CPU form)."""
    target = dtype_from_name(dtype)
    if not data:
        return torch.empty(shape, dtype=target)
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return flat.view(target).reshape(shape)


class _Pickler(ForkingPickler):
    """torch's ForkingPickler, except that a CPU tensor travels as bytes, dtype, shape."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and obj.device.type == "cpu":
            tensor = obj.detach().contiguous()
            data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
            return rebuild_cpu_tensor, (data, dtype_name(tensor.dtype), tuple(tensor.shape))
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name} in a tensor payload")


def serialize_named_tensors(named_tensors: Sequence[tuple[str, torch.Tensor]]) -> str:
    """One rank's entry: ``base64(pickle([(name, tensor), ...]))`` as SGLang's
    ``MultiprocessingSerializer.serialize(named_tensors, output_str=True)``."""
    buffer = io.BytesIO()
    _Pickler(buffer).dump([(str(name), tensor) for name, tensor in named_tensors])
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def deserialize_named_tensors(entry: str) -> NamedTensors:
    """The (name, tensor) pairs of one rank's entry, copied into private memory."""
    try:
        loaded = _Unpickler(io.BytesIO(base64.b64decode(entry, validate=True))).load()
    except (binascii.Error, pickle.UnpicklingError, EOFError) as exc:
        raise WeightLoadError(f"cannot read serialized_named_tensors: {exc}") from exc
    except Exception as exc:  # untrusted bytes or a handle that cannot be opened here
        raise WeightLoadError(f"cannot rebuild a tensor: {type(exc).__name__}: {exc}") from exc
    return _named(loaded)


def _named(loaded: object) -> NamedTensors:
    if not isinstance(loaded, list | tuple):
        raise WeightLoadError(f"expected a list of (name, tensor), got {type(loaded).__name__}")
    pairs: NamedTensors = []
    for item in loaded:
        if not (
            isinstance(item, tuple | list)
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(item[1], torch.Tensor)
        ):
            raise WeightLoadError("every entry must be a (name, tensor) pair")
        pairs.append((item[0], item[1].detach().clone()))
    return pairs
