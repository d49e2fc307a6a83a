"""LoRA adapters (PEFT ``save_pretrained`` folders) merged into a new module.

An adapter is served as its own merged module, ``base ⊕ adapter``, built off to the side:
concurrent requests on different adapters never share mutable state, and a request on an
adapter costs what a request on the base costs. The merged module shares every tensor
the adapter does not touch with the base; the targeted weights are copied before PEFT
merges into them, so the base is never written.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from reef.modelkit.errors import AdapterError
from reef.modelkit.weights import is_adapter_dir, with_weights


def _own_targets(model: torch.nn.Module) -> None:
    """Give every adapted layer private copies of the weights PEFT will merge into."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    for module in model.modules():
        if not isinstance(module, BaseTunerLayer):
            continue
        base = module.get_base_layer()
        for name in ("weight", "bias"):
            tensor = getattr(base, name, None)
            if isinstance(tensor, torch.nn.Parameter):
                setattr(
                    base, name, torch.nn.Parameter(tensor.detach().clone(), requires_grad=False)
                )


def merge_adapter(base: torch.nn.Module, path: str | Path) -> torch.nn.Module:
    """``base ⊕ adapter`` as a new module; ``base`` is untouched.

    Raises :class:`AdapterError` when the folder is not a PEFT adapter, does not match
    the base (unknown target modules, shapes) or lacks some of its weights.
    """
    from peft import PeftConfig, PeftModel

    folder = Path(path)
    if not is_adapter_dir(folder):
        raise AdapterError(f"{str(folder)!r} is not a PEFT adapter folder (no adapter_config.json)")
    clone = with_weights(base, {})
    try:
        config = PeftConfig.from_pretrained(str(folder))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = PeftModel(clone, config)
            result = model.load_adapter(str(folder), "default", is_trainable=False)
    except (ValueError, RuntimeError, OSError, KeyError, TypeError) as exc:
        raise AdapterError(f"cannot load adapter {str(folder)!r}: {exc}") from exc
    missing = [key for key in result.missing_keys if "lora_" in key]
    if missing:
        raise AdapterError(f"adapter {str(folder)!r} lacks weights: {', '.join(missing[:5])}")
    _own_targets(model)
    with torch.no_grad():
        merged: torch.nn.Module = model.merge_and_unload()
    return merged.eval()
