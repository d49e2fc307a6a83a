"""Resolve ``--model`` (a built-in name or a Hugging Face folder) to an :class:`EngineModel`.

Folders are read with ``local_files_only``: the engine never reaches a model hub.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from reef.engine.errors import EngineError, WeightLoadError
from reef.engine.model import EngineModel
from reef.engine.sampling_defaults import NO_MODEL_DEFAULTS, SamplingDefaults, defaults_of
from reef.modelkit.folders import check_model_pair
from reef.modelkit.tiny import BUILTIN_MODELS, build_model, build_tokenizer

DEFAULT_CONTEXT = 2048
GENERATION_CONFIG = "generation_config.json"


def _from_folder(path: Path, device: torch.device) -> tuple[torch.nn.Module, Any]:
    if not path.is_dir():
        raise WeightLoadError(f"--model {str(path)!r} is neither a built-in model nor a folder")
    # fp32 on CPU (bf16/fp16 matmuls are slow or missing there); the folder's dtype on GPU
    dtype: Any = torch.float32 if device.type == "cpu" else "auto"
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise WeightLoadError(f"cannot load model folder {str(path)!r}: {exc}") from exc
    check_model_pair(model, tokenizer, repr(str(path)))  # chat template, vocabulary fit
    return _private(model), tokenizer


def _private(model: torch.nn.Module) -> torch.nn.Module:
    """Copy tensors that transformers left mapped from the folder's files into memory.

    A mapped file rewritten in place would change the served weights, and truncating it
    would kill the engine with SIGBUS; the model is not published yet, so this may
    write to its parameters.
    """
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.data = tensor.data.clone()
    return model


def load_engine_model(spec: str, *, device: str, weight_version: str) -> EngineModel:
    """Build or read the model, its tokenizer and its sampling defaults, and place the
    model on ``device``; a CUDA device this machine lacks is an :class:`EngineError`,
    before any loading."""
    target = torch.device(device)
    if target.type == "cuda" and (target.index or 0) >= torch.cuda.device_count():
        raise EngineError(
            f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)"
        )
    if spec in BUILTIN_MODELS:
        model: torch.nn.Module = build_model(BUILTIN_MODELS[spec])
        tokenizer: Any = build_tokenizer()
    else:
        model, tokenizer = _from_folder(Path(spec), target)
    return EngineModel(
        model.to(target).eval(),
        tokenizer,
        model_path=spec,
        weight_version=weight_version,
        sampling_defaults=generation_defaults(spec),
    )


def context_window(model: torch.nn.Module) -> int:
    """The model's maximum sequence length (``max_position_embeddings``)."""
    config = getattr(model, "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else DEFAULT_CONTEXT


def eos_ids(model: torch.nn.Module, tokenizer: Any) -> frozenset[int]:
    """Token ids that end a generation: the generation config's and the tokenizer's eos."""
    found: set[int] = set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            found.add(value)
        elif isinstance(value, list):
            found.update(v for v in value if isinstance(v, int))
    if isinstance(tokenizer.eos_token_id, int):
        found.add(tokenizer.eos_token_id)
    return frozenset(found)


def generation_defaults(spec: str) -> SamplingDefaults:
    """The sampling defaults the model folder's ``generation_config.json`` sets (none for
    a built-in model or a folder without the file). The file itself is read, not the
    model's ``generation_config``: transformers 4 fills fields the file leaves out with
    its own defaults (top-k 50), which the folder never asked for."""
    if spec in BUILTIN_MODELS:
        return NO_MODEL_DEFAULTS
    path = Path(spec) / GENERATION_CONFIG
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return NO_MODEL_DEFAULTS
    except (OSError, ValueError) as exc:
        raise WeightLoadError(f"cannot read {str(path)!r}: {exc}") from exc
    if not isinstance(values, dict):
        raise WeightLoadError(f"{str(path)!r} is not a JSON object")
    return defaults_of(values)
