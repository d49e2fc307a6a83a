"""The built-in tiny model: a character-level Llama built in code, no hub download.

Every process that calls :func:`build_model` with the same seed gets bit-identical
weights (the initialiser draws from a private, seeded RNG), so two engines, a trainer
and a test all start from the same base without sharing files. The ``"100m"`` size has
the same tokenizer and ~100M parameters; it exists for the reload benchmark and is never
trained.

The tokenizer maps one character to one token (lower-cased; anything outside the
vocabulary is ``<unk>``) and carries a chat template::

    <bos><|user|>hello<eos><|assistant|>

With tools offered, the template lists them in a system block and writes an assistant
turn's calls in the pythonic syntax (:mod:`reef.engine.tool_parsers`)::

    <bos><|system|>tools:
    get_weather(city): the weather in a city<eos><|user|>weather in paris?<eos>
    <|assistant|>[get_weather(city="paris")]<eos><|tool|>sunny<eos><|assistant|>
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

Size = Literal["tiny", "100m"]

#: the seed every process uses for the built-in weights
TINY_SEED: Final = 1234
#: ``--model`` names that build a model in code instead of reading a folder
BUILTIN_MODELS: Final[dict[str, Size]] = {"tiny": "tiny", "tiny-100m": "100m"}

SPECIAL_TOKENS: Final = (
    "<pad>",
    "<bos>",
    "<eos>",
    "<unk>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|tool|>",
)
CHARACTERS: Final = "abcdefghijklmnopqrstuvwxyz0123456789 \n.,!?:;'\"-()/_*+=%#@&[]"
ROLES: Final = ("system", "user", "assistant", "tool")

#: the offered tools as a system block, one ``name(parameters): description`` a line
_TOOLS_BLOCK: Final = (
    "{% if tools %}<|system|>tools:"
    "{% for tool in tools %}{% set f = tool['function'] if 'function' in tool else tool %}"
    "{% set properties = (f['parameters'] or {})['properties'] or {} %}"
    "{{ '\\n' }}{{ f['name'] }}({{ properties.keys() | join(', ') }})"
    "{% if f['description'] %}: {{ f['description'] }}{% endif %}"
    "{% endfor %}{{ eos_token }}{% endif %}"
)
#: an assistant turn's calls, in the pythonic syntax: ``[name(key="value"), ...]``
_CALLS: Final = (
    "{% if message['tool_calls'] %}["
    "{% for call in message['tool_calls'] %}"
    "{% set f = call['function'] if 'function' in call else call %}"
    "{{ f['name'] }}("
    "{% if f['arguments'] is mapping %}"
    "{% for key, value in f['arguments'].items() %}"
    "{{ key }}={{ value | tojson }}{% if not loop.last %}, {% endif %}"
    "{% endfor %}{% endif %})"
    "{% if not loop.last %}, {% endif %}"
    "{% endfor %}]{% endif %}"
)
#: one ``<|role|>content<eos>`` block per message; unknown roles are read as ``user``.
#: With tools: a ``<|system|>tools:`` block first, and the calls of an assistant turn
#: after its text (what the ``pythonic`` tool-call parser reads back)
CHAT_TEMPLATE: Final = (
    "{{ bos_token }}" + _TOOLS_BLOCK + "{% for message in messages %}"
    "{% set role = message['role'] if message['role'] in " + repr(list(ROLES)) + " else 'user' %}"
    "<|{{ role }}|>{{ message['content'] or '' }}" + _CALLS + "{{ eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@dataclass(frozen=True, slots=True)
class _Shape:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int = 1024


_SHAPES: Final[dict[Size, _Shape]] = {
    # ~109k parameters: small enough to train on a CPU within a test
    "tiny": _Shape(64, 176, 2, 4),
    # ~101M parameters, same vocabulary (only the reload benchmark uses it)
    "100m": _Shape(1024, 2752, 8, 16),
}


def vocabulary() -> dict[str, int]:
    """Token → id: the special tokens first (``<pad>`` is 0), then one id per character."""
    return {token: index for index, token in enumerate((*SPECIAL_TOKENS, *CHARACTERS))}


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The character tokenizer with its chat template, built in code."""
    vocab = vocabulary()
    core = Tokenizer(models.WordLevel(vocab, SPECIAL_TOKENS[3]))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    roles = dict(zip(("pad", "bos", "eos", "unk"), SPECIAL_TOKENS, strict=False))
    factory: Any = PreTrainedTokenizerFast  # transformers' constructors are untyped
    tokenizer: PreTrainedTokenizerFast = factory(
        tokenizer_object=core,
        **{f"{role}_token": token for role, token in roles.items()},
        additional_special_tokens=list(SPECIAL_TOKENS[4:]),
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_config(size: Size = "tiny") -> LlamaConfig:
    """The Llama configuration of a built-in size (fp32, untied embeddings)."""
    vocab = vocabulary()
    shape = _SHAPES[size]
    return LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_attention_heads,
        max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=vocab["<bos>"],
        eos_token_id=vocab["<eos>"],
        pad_token_id=vocab["<pad>"],
        dtype="float32",
    )


def build_model(size: Size = "tiny", *, seed: int = TINY_SEED) -> LlamaForCausalLM:
    """A randomly initialised model, identical in every process for the same seed."""
    factory: Any = LlamaForCausalLM  # transformers' constructors are untyped
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model: LlamaForCausalLM = factory(build_config(size))
    model.train(False)
    return model


def save_tiny(directory: str | Path, *, size: Size = "tiny", seed: int = TINY_SEED) -> Path:
    """Write a Hugging Face folder (config, safetensors weights, tokenizer files)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    build_model(size, seed=seed).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    make_portable(path)
    return path


def make_portable(directory: str | Path) -> None:
    """Let transformers 4.x (what SGLang pins) read a folder transformers 5 wrote.

    5.x names the tokenizer class ``TokenizersBackend`` and lists ``extra_special_tokens``;
    4.x knows ``PreTrainedTokenizerFast`` and ``additional_special_tokens`` (5.x reads
    both). The config gains 4.x's ``torch_dtype`` and ``rope_theta`` beside 5.x's keys.
    """
    path = Path(directory)
    tokenizer_file = path / "tokenizer_config.json"
    if tokenizer_file.is_file():
        settings = json.loads(tokenizer_file.read_text())
        settings["tokenizer_class"] = "PreTrainedTokenizerFast"
        extra = settings.pop("extra_special_tokens", None)
        if isinstance(extra, list):
            settings["additional_special_tokens"] = extra
        tokenizer_file.write_text(json.dumps(settings, indent=2) + "\n")
    config_file = path / "config.json"
    if config_file.is_file():
        config = json.loads(config_file.read_text())
        config.setdefault("torch_dtype", config.get("dtype", "float32"))
        rope = config.get("rope_parameters")
        if isinstance(rope, dict) and "rope_theta" in rope:
            config.setdefault("rope_theta", rope["rope_theta"])
        config_file.write_text(json.dumps(config, indent=2) + "\n")


def parameter_count(model: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())
