"""Weights as values: checks, structural copies that share untouched tensors, LoRA merges."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from reef.engine.errors import AdapterError, WeightLoadError
from reef.modelkit import tiny
from reef.modelkit.adapters import merge_adapter
from reef.modelkit.weights import (
    check_compatible,
    dtype_from_name,
    read_safetensors_dir,
    weights_digest,
    with_weights,
)


def test_with_weights_replaces_named_tensors_and_shares_the_rest() -> None:
    base = tiny.build_model()
    before = weights_digest(base)
    new_head = torch.ones_like(base.lm_head.weight)
    copy = with_weights(base, {"lm_head.weight": new_head})
    assert torch.equal(copy.lm_head.weight, new_head)
    assert copy.model.embed_tokens.weight is base.model.embed_tokens.weight
    assert weights_digest(base) == before


def test_check_compatible_names_the_problem() -> None:
    state = tiny.build_model().state_dict()
    with pytest.raises(WeightLoadError, match=r"missing tensor names: lm_head\.weight"):
        check_compatible(state, {k: v for k, v in state.items() if k != "lm_head.weight"})
    with pytest.raises(WeightLoadError, match="unexpected tensor names: extra"):
        check_compatible(state, {**state, "extra": torch.zeros(1)})
    with pytest.raises(WeightLoadError, match=r"shape mismatch: lm_head.weight \(3, 64\)"):
        check_compatible(state, {**state, "lm_head.weight": torch.zeros(3, 64)})


def test_missing_folder_is_a_weight_load_error(tmp_path: Path) -> None:
    with pytest.raises(WeightLoadError, match="does not exist"):
        read_safetensors_dir(tmp_path / "nope")
    with pytest.raises(WeightLoadError, match=r"no \*\.safetensors"):
        read_safetensors_dir(tmp_path)


def test_dtype_names_as_slime_sends_them() -> None:
    assert dtype_from_name("bfloat16") is torch.bfloat16
    assert dtype_from_name("torch.float32") is torch.float32
    with pytest.raises(WeightLoadError):
        dtype_from_name("Tensor")


def test_merge_adapter_leaves_the_base_untouched(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False)
    get_peft_model(tiny.build_model(), config).save_pretrained(str(tmp_path / "adapter"))
    base = tiny.build_model()
    before = weights_digest(base)
    merged = merge_adapter(base, tmp_path / "adapter")
    assert weights_digest(base) == before
    assert weights_digest(merged) != before
    assert set(merged.state_dict()) == set(base.state_dict())


def test_merge_adapter_rejects_a_folder_that_is_not_an_adapter(tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match="not a PEFT adapter"):
        merge_adapter(tiny.build_model(), tmp_path)
