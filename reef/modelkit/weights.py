"""Weights as immutable values: read, check, and build a new module off to the side.

The engine never writes into a parameter that a request may be reading. A new weight
version is a *new module*: :func:`with_weights` deep-copies the module structure while
substituting the new tensors for the old ones and sharing every tensor that did not
change (safe, because no tensor is ever mutated in place after it is published). A
swap is then one reference assignment; in-flight requests keep the old module alive
until they finish.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Final, TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load

from reef.modelkit.errors import WeightLoadError

M = TypeVar("M", bound=torch.nn.Module)

SUPPORTED_LOAD_FORMATS: Final = (None, "auto", "safetensors")
_MAX_LISTED: Final = 5


def read_safetensors_dir(
    path: str | Path, load_format: str | None = None
) -> dict[str, torch.Tensor]:
    """All tensors of a folder's ``*.safetensors`` files (one file or shards), on the CPU."""
    if load_format not in SUPPORTED_LOAD_FORMATS:
        raise WeightLoadError(f"unsupported load_format {load_format!r} (use auto or safetensors)")
    folder = Path(path)
    if not folder.is_dir():
        raise WeightLoadError(f"model_path {str(folder)!r} does not exist or is not a directory")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise WeightLoadError(f"no *.safetensors file in {str(folder)!r}")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        # Read into private memory: ``load_file`` maps the file, and a trainer that later
        # rewrites it in place would change (or, truncating it, SIGBUS) served weights.
        try:
            tensors.update(load(file.read_bytes()))
        except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
            raise WeightLoadError(f"cannot read {file.name}: {exc}") from exc
    return tensors


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    return shown + (f" (+{len(names) - _MAX_LISTED} more)" if len(names) > _MAX_LISTED else "")


def check_compatible(
    current: Mapping[str, torch.Tensor], new: Mapping[str, torch.Tensor], *, partial: bool = False
) -> None:
    """Raise :class:`WeightLoadError` naming unknown, missing or reshaped tensors.

    ``partial`` allows ``new`` to cover only some of the names (a bucket of a broadcast).
    """
    unexpected = sorted(set(new) - set(current))
    if unexpected:
        raise WeightLoadError(f"unexpected tensor names: {_listed(unexpected)}")
    missing = [] if partial else sorted(set(current) - set(new))
    if missing:
        raise WeightLoadError(f"missing tensor names: {_listed(missing)}")
    reshaped = [
        f"{name} {tuple(new[name].shape)} != {tuple(current[name].shape)}"
        for name in sorted(new)
        if new[name].shape != current[name].shape
    ]
    if reshaped:
        raise WeightLoadError(f"shape mismatch: {_listed(reshaped)}")


def check_dtypes(current: Mapping[str, torch.Tensor], new: Mapping[str, torch.Tensor]) -> None:
    """Raise :class:`WeightLoadError` naming tensors of ``new`` whose dtype differs."""
    changed = [
        f"{name} {dtype_name(new[name].dtype)} != {dtype_name(current[name].dtype)}"
        for name in sorted(new)
        if name in current and new[name].dtype != current[name].dtype
    ]
    if changed:
        raise WeightLoadError(f"dtype mismatch: {_listed(changed)}")


def with_weights(module: M, new: Mapping[str, torch.Tensor]) -> M:
    """A copy of ``module`` whose state-dict entries named in ``new`` are replaced.

    Tensors not named in ``new`` (and non-persistent buffers) are shared, not copied.
    New tensors are cast to the dtype and moved to the device of the ones they replace.
    """
    current = module.state_dict(keep_vars=True)
    check_compatible(current, new, partial=True)
    memo: dict[int, object] = {id(b): b for b in module.buffers()}
    memo.update({id(p): p for p in module.parameters()})
    with torch.no_grad():
        for name, tensor in new.items():
            old = current[name]
            value = tensor.detach().to(device=old.device, dtype=old.dtype).contiguous()
            if isinstance(old, torch.nn.Parameter):
                memo[id(old)] = torch.nn.Parameter(value, requires_grad=False)
            else:
                memo[id(old)] = value
    return copy.deepcopy(module, memo)


def complete_tied(
    module: torch.nn.Module, new: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """``new`` plus the tied names it leaves out (``save_pretrained`` writes a tied pair once)."""
    by_tensor: dict[int, list[str]] = {}
    for name, tensor in module.state_dict(keep_vars=True).items():
        by_tensor.setdefault(id(tensor), []).append(name)
    completed = dict(new)
    for names in by_tensor.values():
        present = [name for name in names if name in new]
        for name in names:
            if present and name not in completed:
                completed[name] = new[present[0]]
    return completed


def weights_digest(state: Mapping[str, torch.Tensor] | torch.nn.Module) -> str:
    """sha256 over names, dtypes, shapes and bytes of a state dict, in name order."""
    tensors = state.state_dict() if isinstance(state, torch.nn.Module) else state
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().to("cpu").contiguous()
        header = json.dumps([name, str(tensor.dtype), list(tensor.shape)])
        digest.update(header.encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def is_adapter_dir(path: str | Path) -> bool:
    """A PEFT adapter folder (``save_pretrained`` of a ``PeftModel``)."""
    return (Path(path) / "adapter_config.json").is_file()


def dtype_from_name(name: str) -> torch.dtype:
    """``"bfloat16"`` or ``"torch.bfloat16"`` → ``torch.bfloat16`` (SGLang's wire form)."""
    value = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise WeightLoadError(f"unknown dtype {name!r}")
    return value


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` → ``"bfloat16"`` (what slime sends)."""
    return str(dtype).removeprefix("torch.")
