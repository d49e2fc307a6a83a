"""LoRA SFT with PEFT: a candidate is an adapter over the base model, not full weights.

Imported only when the ``sft`` recipe trains with ``training.method: lora`` (never by
``reef serve`` at start-up): it imports torch and peft.

The chain of LoRA releases: every release is a *complete* adapter over the same base
(``training.base_model``, which must be what the engine was started with), never a
delta on another adapter. The engine serves a release as ``base + adapter``
(``/update_weights_from_disk`` with the adapter folder, or SGLang's
``/load_lora_adapter``), so a release alone says what is served, also after an engine
restart. Hence:

* parent = the creation release (no folder): a fresh adapter (A random, B zero: the
  candidate starts as the base);
* parent = an adapter: its weights are loaded and training continues from them; its
  shape (``r``, ``lora_alpha``, target modules) must be the recipe's, and the base it
  names (``base_model_name_or_path``) must be ``training.base_model``;
* parent = full weights: refused (TrainingError). The engine applies an adapter to its
  own base weights, not to the full-weight release it served before, so an adapter
  trained on those weights would not be served as trained.

The candidate folder is what ``PeftModel.save_pretrained`` writes, less its model card:
``adapter_config.json`` and ``adapter_model.safetensors``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peft import LoraConfig, PeftConfig, get_peft_model, set_peft_model_state_dict
from peft.utils import load_peft_weights

from recipes.errors import TrainingError
from trainers.backends.devices import Placement
from trainers.backends.torch_backend import (
    ADAPTER_MARKER,
    encode_examples,
    load,
    optimise,
    pad_id,
    torch_threads,
)

if TYPE_CHECKING:
    from recipes.training import Example, LoraSettings, SftTraining

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_FILES = (ADAPTER_MARKER, ADAPTER_WEIGHTS)


def lora_config(settings: LoraSettings, base_model: str) -> LoraConfig:
    """PEFT's configuration of a fresh adapter with the recipe's shape."""
    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
        base_model_name_or_path=base_model,
    )


def parent_config(parent: Path, settings: LoraSettings, base_model: str) -> LoraConfig:
    """The parent adapter's configuration, checked against the recipe's; the recipe's
    dropout applies (it only acts while training)."""
    if not (parent / ADAPTER_MARKER).is_file():
        what = "full weights" if (parent / "config.json").is_file() else "no adapter"
        raise TrainingError(
            f"the parent release ({parent}) holds {what}: a LoRA candidate continues its "
            f"parent's adapter over the base model {base_model!r}, and the engine applies "
            "an adapter to its base, not to a full-weight release. Train with "
            "training.method full, or roll the scenario back to its creation release."
        )
    try:
        saved = PeftConfig.from_pretrained(str(parent))
    except (OSError, ValueError, TypeError) as exc:
        raise TrainingError(f"cannot read the parent adapter {parent}: {exc}") from exc
    if not isinstance(saved, LoraConfig):
        raise TrainingError(f"the parent adapter {parent} is {saved.peft_type}, not LoRA")
    problems = []
    if saved.r != settings.r:
        problems.append(f"r {saved.r} != {settings.r}")
    if saved.lora_alpha != settings.alpha:
        problems.append(f"alpha {saved.lora_alpha} != {settings.alpha}")
    targets = saved.target_modules
    if not isinstance(targets, (set, list, tuple)) or set(targets) != set(settings.target_modules):
        problems.append(f"target_modules {targets} != {sorted(settings.target_modules)}")
    if saved.base_model_name_or_path not in (None, "", base_model):
        problems.append(f"base {saved.base_model_name_or_path!r} != {base_model!r}")
    if problems:
        raise TrainingError(
            f"the parent adapter {parent} does not match training.lora / base_model "
            f"({'; '.join(problems)}): a release chain keeps one adapter shape over one base"
        )
    saved.lora_dropout = settings.dropout
    saved.inference_mode = False
    return saved


def _adapter_model(parent: Path | None, options: SftTraining) -> tuple[Any, Any, bool]:
    """(PEFT model with trainable adapter, tokenizer, continued from a parent adapter)."""
    config = (
        lora_config(options.lora, options.base_model)
        if parent is None
        else parent_config(parent, options.lora, options.base_model)
    )
    base, tokenizer = load(None, options.base_model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model: Any = get_peft_model(base, config)
        except ValueError as exc:  # e.g. a target module the base does not have
            raise TrainingError(
                f"cannot add a LoRA adapter to {options.base_model!r}: {exc}"
            ) from exc
    model.peft_config["default"].base_model_name_or_path = options.base_model
    if parent is not None:
        try:
            weights = load_peft_weights(str(parent), device="cpu")
            result: Any = set_peft_model_state_dict(model, weights)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise TrainingError(f"cannot load the parent adapter {parent}: {exc}") from exc
        missing = [key for key in result.missing_keys if "lora_" in key]
        if missing or result.unexpected_keys:
            raise TrainingError(
                f"the parent adapter {parent} does not fit the base: missing "
                f"{missing[:3]}, unexpected {list(result.unexpected_keys)[:3]}"
            )
    return model, tokenizer, parent is not None


def train_sft_lora(
    parent: Path | None,
    examples: Sequence[Example],
    out_dir: Path,
    options: SftTraining,
) -> dict[str, float]:
    """Train the adapter (the parent's, or a fresh one) on the examples; write the
    adapter folder to ``out_dir``."""
    started = time.perf_counter()
    place = Placement.of_settings(options)
    with torch_threads(options.threads), place.seeded(options.seed):
        model, tokenizer, continued = _adapter_model(parent, options)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        rows, cuts = encode_examples(tokenizer, examples, options.max_length)
        losses = optimise(model.to(place.device), rows, options, place, pad=pad_id(tokenizer))
        out_dir.mkdir(parents=True, exist_ok=True)
        model.to("cpu").save_pretrained(str(out_dir), save_embedding_layers=False)
    for name in sorted(p.name for p in out_dir.iterdir()):
        if name not in ADAPTER_FILES:  # the model card PEFT writes beside the adapter
            (out_dir / name).unlink()
    return {
        "examples": float(len(examples)),
        "steps": float(options.steps),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        **cuts,
        "trainable_parameters": float(trainable),
        "continued": 1.0 if continued else 0.0,
        "train_seconds": time.perf_counter() - started,
    }
