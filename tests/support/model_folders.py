"""Real-architecture model folders, built here: no model hub.

:func:`build_folder` writes a Hugging Face folder as a hub download would hold it, small
enough for CI on 2 cores: a transformers model of a real architecture (Llama, Qwen2,
Qwen3) with random weights drawn from a seed, and a byte-level BPE tokenizer trained from
scratch with the ``tokenizers`` library on text the caller gives, saved with its family's
chat template (``<|start_header_id|>`` headers and ``<|eot_id|>`` for Llama 3, ChatML for
Qwen). The model's vocabulary is the tokenizer's rounded up to a multiple of 64, as the
families pad theirs.

:func:`strip_chat_template` and :func:`with_foreign_tokenizer` break a folder the two
ways Reef must refuse clearly.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from transformers.utils import logging as hf_logging

Architecture = Literal["llama", "qwen2", "qwen3"]
ARCHITECTURES: Final[tuple[Architecture, ...]] = ("llama", "qwen2", "qwen3")

#: the pre-tokenisers' split (Llama 3 groups digits by three, Qwen splits them); a run of
#: newlines is one piece, so a prompt that ends in "\n\n" keeps its tokens when the
#: answer follows it
LLAMA_SPLIT: Final = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN_SPLIT: Final = LLAMA_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
#: Llama 3's template, less its date and tool preamble
LLAMA_TEMPLATE: Final = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' "
    "+ message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)
LLAMA_SPECIALS: Final = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|finetune_right_pad_id|>",
)
#: ChatML as Qwen2.5 and Qwen3 write it (no default system message, no thinking block)
CHATML_TEMPLATE: Final = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True, slots=True)
class Family:
    """What a family's folders hold besides their shape."""

    config: type[PretrainedConfig]
    model: type[Any]
    specials: tuple[str, ...]
    bos: str | None
    eos: str
    pad: str
    template: str
    split: str
    tied: bool


FAMILIES: Final[dict[Architecture, Family]] = {
    "llama": Family(
        LlamaConfig,
        LlamaForCausalLM,
        LLAMA_SPECIALS,
        "<|begin_of_text|>",
        "<|eot_id|>",
        "<|finetune_right_pad_id|>",
        LLAMA_TEMPLATE,
        LLAMA_SPLIT,
        tied=False,
    ),
    "qwen2": Family(
        Qwen2Config,
        Qwen2ForCausalLM,
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        None,
        "<|im_end|>",
        "<|endoftext|>",
        CHATML_TEMPLATE,
        QWEN_SPLIT,
        tied=True,
    ),
    "qwen3": Family(
        Qwen3Config,
        Qwen3ForCausalLM,
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        None,
        "<|im_end|>",
        "<|endoftext|>",
        CHATML_TEMPLATE,
        QWEN_SPLIT,
        tied=True,
    ),
}


def train_tokenizer(family: Family, texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE with the family's pre-tokeniser on ``texts``, each also as a user
    turn in the family's format (so role names become tokens)."""
    from jinja2 import Template

    template = Template(family.template)
    corpus = []
    for text in texts:
        corpus.append(text)
        corpus.append(
            template.render(
                messages=[{"role": "user", "content": text}],
                add_generation_prompt=True,
                bos_token=family.bos or "",
            )
        )
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(family.split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(family.specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    core.train_from_iterator(corpus, trainer=trainer)
    return core


def _config(family: Family, tokenizer: Any, shape: dict[str, int]) -> PretrainedConfig:
    vocab = -(-len(tokenizer) // 64) * 64
    factory: Any = family.config  # transformers' constructors are untyped
    config: PretrainedConfig = factory(
        vocab_size=vocab,
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        head_dim=shape["hidden"] // shape["heads"],
        max_position_embeddings=512,
        tie_word_embeddings=family.tied,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    return config


def build_folder(
    directory: Path,
    architecture: Architecture,
    texts: Iterable[str],
    *,
    vocab_size: int = 300,
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
) -> Path:
    """Write a model folder of ``architecture`` into ``directory`` (the same bytes for
    the same arguments): config, safetensors weights, tokenizer and chat template."""
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    family = FAMILIES[architecture]
    factory: Any = PreTrainedTokenizerFast
    tokenizer = factory(
        tokenizer_object=train_tokenizer(family, texts, vocab_size),
        bos_token=family.bos,
        eos_token=family.eos,
        pad_token=family.pad,
    )
    tokenizer.chat_template = family.template
    shape = {
        "hidden": hidden,
        "intermediate": hidden * 11 // 4,
        "layers": layers,
        "heads": heads,
        "kv_heads": kv_heads,
    }
    config = _config(family, tokenizer, shape)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = family.model(config)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def strip_chat_template(folder: Path, out: Path) -> Path:
    """A copy of ``folder`` whose tokenizer carries no chat template."""
    shutil.copytree(folder, out)
    (out / "chat_template.jinja").unlink(missing_ok=True)
    settings_file = out / "tokenizer_config.json"
    settings = json.loads(settings_file.read_text())
    settings.pop("chat_template", None)
    settings_file.write_text(json.dumps(settings))
    return out


def with_foreign_tokenizer(folder: Path, other: Path, out: Path) -> Path:
    """A copy of ``folder`` holding ``other``'s tokenizer files (a tokenizer that does not
    belong to the weights)."""
    shutil.copytree(folder, out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (other / name).is_file():
            shutil.copy(other / name, out / name)
    return out
