"""The built-in tiny model: same weights in every process, HF folder round trip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from reef.modelkit import tiny
from reef.modelkit.weights import weights_digest

_DIGEST = (
    "from reef.modelkit import tiny; from reef.modelkit.weights import weights_digest; "
    "print(weights_digest(tiny.build_model()))"
)


def test_builtin_weights_are_identical_in_another_process() -> None:
    other = subprocess.run(
        [sys.executable, "-c", _DIGEST], capture_output=True, text=True, check=True, timeout=120
    )
    assert other.stdout.strip() == weights_digest(tiny.build_model())


def test_builtin_weights_do_not_depend_on_the_global_rng() -> None:
    torch.manual_seed(999)
    first = weights_digest(tiny.build_model())
    torch.rand(10)
    assert weights_digest(tiny.build_model()) == first
    assert weights_digest(tiny.build_model(seed=1)) != first


def test_tiny_has_about_100k_parameters() -> None:
    assert 80_000 < tiny.parameter_count(tiny.build_model()) < 130_000


def test_100m_config_has_about_100m_parameters() -> None:
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        # transformers leaves the model constructor unannotated
        model = LlamaForCausalLM(tiny.build_config("100m"))  # type: ignore[no-untyped-call]
    assert 90e6 < tiny.parameter_count(model) < 115e6


def test_tokenizer_is_character_level_and_lower_cases() -> None:
    tokenizer = tiny.build_tokenizer()
    ids = tokenizer.encode("Hi, 42!")
    assert len(ids) == len("Hi, 42!")
    assert tokenizer.decode(ids) == "hi, 42!"
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode("é")) == ["<unk>"]


def test_chat_template_marks_roles_and_the_generation_prompt() -> None:
    tokenizer = tiny.build_tokenizer()
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<bos><|system|>be brief<eos><|user|>hi<eos><|assistant|>"


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    folder = tiny.save_tiny(tmp_path / "tiny")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in folder.iterdir()
    }
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert weights_digest(model) == weights_digest(tiny.build_model())
    built = tiny.build_tokenizer()
    assert tokenizer.encode("hello, world") == built.encode("hello, world")
    assert tokenizer.chat_template == built.chat_template
    assert tokenizer.eos_token_id == built.eos_token_id
