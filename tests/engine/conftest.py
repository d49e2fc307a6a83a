"""Engine processes on loopback and the weight sets the tests swap between.

``running_engine`` starts ``python -m reef.cli.engine`` (what ``reef engine`` runs) as a
real process and waits for ``GET /health``. Weight folders are built once per session.
"""

from __future__ import annotations

import pytest

from tests.support.engine import WeightSets


@pytest.fixture(scope="session")
def weight_sets(tmp_path_factory: pytest.TempPathFactory) -> WeightSets:
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file

    from reef.modelkit import tiny

    root = tmp_path_factory.mktemp("weights")
    seed_a = tiny.save_tiny(root / "a")
    seed_b = tiny.save_tiny(root / "b", seed=1)
    config = LoraConfig(
        r=4,
        lora_alpha=64,
        target_modules=["q_proj", "v_proj", "o_proj", "down_proj"],
        init_lora_weights=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        peft_model = get_peft_model(tiny.build_model(), config)
    peft_model.save_pretrained(str(root / "adapter"))
    state = {k: v.contiguous() for k, v in tiny.build_model().state_dict().items()}
    state["lm_head.weight"] = torch.zeros(3, 64)
    (root / "mismatched").mkdir()
    save_file(state, root / "mismatched" / "model.safetensors")
    return WeightSets(seed_a, seed_b, root / "adapter", root / "mismatched")

