"""The ``torch`` training backend: full-weight SFT, GRPO and greedy evaluation, in-process.

Imported only when a recipe trains or evaluates (never by ``reef serve`` at start-up):
recipes reach it through the :class:`recipes.training.TrainingBackend` port, which
:class:`trainers.backends.inprocess.InProcessBackend` implements by importing this module
on first use. The built-in models come from the model kit (:mod:`reef.modelkit`), never
from the serving engine's modules.

A parent release is a Hugging Face folder (``save_pretrained``) or ``None`` for the
creation release, whose weights are ``base_model`` (a built-in engine model such as
``tiny``, rebuilt bit-identically from its seed, or a folder). Candidates are written
with ``save_pretrained`` (safetensors), which the engine loads from disk; the built-in
models' tokenizer (the engine's own) is written beside them.

Weights read from a folder are copied into private memory first: the folder may be a
shared cache whose files must never change under a reader (see reef.engine.loader).

LoRA training (:mod:`trainers.backends.lora`) reuses the example encoding and the
optimiser loop; evaluation applies an adapter release to the base as the engine does
(:func:`load_serving`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from recipes.errors import TrainingError
from reef.modelkit.tiny import BUILTIN_MODELS, build_model, build_tokenizer, make_portable

if TYPE_CHECKING:
    from recipes.training import GrpoTraining, Rollout, SftTraining

Conversation = Sequence[Mapping[str, str]]
IGNORE = -100
ADAPTER_MARKER = "adapter_config.json"

# loading and saving print progress bars to stderr per call: noise in a trainer's log
hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run the block with ``count`` intra-op threads (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def load(folder: Path | None, base_model: str) -> tuple[torch.nn.Module, Any]:
    """The release's full-weight model (fp32, private memory) and the tokenizer to use
    with it; a LoRA adapter folder is refused (see :func:`load_serving`)."""
    spec = base_model if folder is None else str(folder)
    builtin = base_model in BUILTIN_MODELS
    if spec in BUILTIN_MODELS:
        return build_model(BUILTIN_MODELS[spec]), build_tokenizer()
    path = Path(spec)
    if (path / ADAPTER_MARKER).is_file():
        raise TrainingError(f"{path} is a LoRA adapter; full-weight training needs full weights")
    if not (path / "config.json").is_file():
        raise TrainingError(f"{path} holds no model (no config.json)")
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, dtype=torch.float32
        )
        tokenizer = build_tokenizer() if builtin else AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise TrainingError(f"cannot load model folder {path}: {exc}") from exc
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.data = tensor.data.clone()
    return model, tokenizer


def load_serving(folder: Path | None, base_model: str) -> tuple[torch.nn.Module, Any]:
    """The model as the engine serves the release: full weights as they are, a PEFT
    adapter merged onto ``base_model`` by the engine's own code
    (:func:`reef.modelkit.adapters.merge_adapter`)."""
    if folder is None or not (folder / ADAPTER_MARKER).is_file():
        return load(folder, base_model)
    from reef.modelkit.adapters import merge_adapter
    from reef.modelkit.errors import AdapterError

    base, tokenizer = load(None, base_model)
    try:
        return merge_adapter(base, folder), tokenizer
    except AdapterError as exc:
        raise TrainingError(f"cannot apply adapter {folder} to {base_model!r}: {exc}") from exc


def prompt_ids(tokenizer: Any, messages: Conversation) -> list[int]:
    encoded = tokenizer.apply_chat_template(
        [dict(m) for m in messages], add_generation_prompt=True, tokenize=True
    )
    if isinstance(encoded, Mapping):
        encoded = encoded["input_ids"]
    return [int(t) for t in encoded]


def encode_example(
    tokenizer: Any, messages: Conversation, target: str, max_length: int
) -> tuple[list[int], list[int]]:
    """(input ids, labels): the loss covers only the target tokens and the closing eos."""
    prompt = prompt_ids(tokenizer, messages)
    answer = [int(t) for t in tokenizer(target, add_special_tokens=False)["input_ids"]]
    answer.append(int(tokenizer.eos_token_id))
    ids = (prompt + answer)[-max_length:]
    labels = ([IGNORE] * len(prompt) + answer)[-max_length:]
    return ids, labels


def _padded(
    rows: Sequence[tuple[list[int], list[int]]], pad: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in rows])
    labels = torch.tensor([lab + [IGNORE] * (width - len(lab)) for _, lab in rows])
    mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in rows])
    return ids, labels, mask


def train_sft(
    parent: Path | None,
    examples: Sequence[tuple[Conversation, str]],
    out_dir: Path,
    options: SftTraining,
    *,
    micro_batch: int = 64,
) -> dict[str, float]:
    """Fine-tune the parent's full weights on the examples; save an HF folder to ``out_dir``."""
    started = time.perf_counter()
    with torch_threads(options.threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.seed)
        model, tokenizer = load(parent, options.base_model)
        chunks = sft_chunks(tokenizer, examples, options.max_length, micro_batch)
        losses = optimise(model, chunks, options)
        out_dir.mkdir(parents=True, exist_ok=True)
        saver: Any = model  # transformers' save_pretrained is untyped
        saver.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
        make_portable(out_dir)
    return {
        "examples": float(len(examples)),
        "steps": float(options.steps),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "train_seconds": time.perf_counter() - started,
    }


def sft_chunks(
    tokenizer: Any, examples: Sequence[tuple[Conversation, str]], max_length: int, micro_batch: int
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The examples encoded and padded, ``micro_batch`` rows per (ids, labels, mask)."""
    rows = [encode_example(tokenizer, m, t, max_length) for m, t in examples]
    return [
        _padded(rows[i : i + micro_batch], int(tokenizer.pad_token_id or 0))
        for i in range(0, len(rows), micro_batch)
    ]


def optimise(
    model: torch.nn.Module,
    chunks: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    options: SftTraining,
) -> list[float]:
    """``options.steps`` full-batch AdamW steps on the trainable parameters (all of a
    full model's, the adapter's of a PEFT model); the loss per step."""
    model.train(True)
    optimiser = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=options.learning_rate,
        weight_decay=options.weight_decay,
    )
    tokens = sum(int((labels != IGNORE).sum()) for _, labels, _ in chunks)
    losses = []
    for _ in range(options.steps):
        optimiser.zero_grad()
        total = 0.0
        for ids, labels, mask in chunks:
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
            target = labels[:, 1:]
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                target.reshape(-1),
                ignore_index=IGNORE,
                reduction="sum",
            ) / max(tokens, 1)
            torch.autograd.backward(loss)
            total += float(loss.item())
        optimiser.step()
        losses.append(total)
    model.train(False)
    return losses


def train_grpo(
    parent: Path | None, rollouts: Sequence[Rollout], out_dir: Path, options: GrpoTraining
) -> dict[str, float]:
    """Clipped policy-gradient steps on recorded rollouts; save an HF folder to ``out_dir``."""
    started = time.perf_counter()
    with torch_threads(options.threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.seed)
        model, tokenizer = load(parent, options.base_model)
        batch = _rollout_tensors(rollouts, int(tokenizer.pad_token_id or 0))
        model.train(True)
        optimiser = torch.optim.AdamW(model.parameters(), lr=options.learning_rate)
        history = [_grpo_step(model, optimiser, batch, options.clip) for _ in range(options.steps)]
        model.train(False)
        out_dir.mkdir(parents=True, exist_ok=True)
        saver: Any = model
        saver.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
        make_portable(out_dir)
    return {
        "rollouts": float(len(rollouts)),
        "steps": float(options.steps),
        "loss_first": history[0][0],
        "loss_last": history[-1][0],
        "ratio_first": history[0][1],
        "clipped_last": history[-1][2],
        "train_seconds": time.perf_counter() - started,
    }


def _rollout_tensors(
    rollouts: Sequence[Rollout], pad: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids, attention mask, output-token mask, rollout logprobs (aligned with the
    shifted targets) and advantages."""
    width = max(len(r.prompt_ids) + len(r.output_ids) for r in rollouts)
    ids, mask, out_mask, old = [], [], [], []
    for r in rollouts:
        row = r.prompt_ids + r.output_ids
        fill = width - len(row)
        ids.append(row + [pad] * fill)
        mask.append([1] * len(row) + [0] * fill)
        # target position t predicts token t + 1: outputs start at len(prompt) - 1
        before = len(r.prompt_ids) - 1
        out_mask.append([0] * before + [1] * len(r.output_ids) + [0] * fill)
        old.append([0.0] * before + list(r.logprobs) + [0.0] * fill)
    advantages = torch.tensor([r.advantage for r in rollouts])
    return (
        torch.tensor(ids),
        torch.tensor(mask),
        torch.tensor(out_mask, dtype=torch.float32),
        torch.tensor(old),
        advantages,
    )


def _grpo_step(
    model: torch.nn.Module,
    optimiser: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    clip: float,
) -> tuple[float, float, float]:
    ids, mask, out_mask, old, advantages = batch
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    new = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    ratio = torch.exp((new - old) * out_mask)
    gain = advantages[:, None]
    objective = torch.minimum(ratio * gain, torch.clamp(ratio, 1 - clip, 1 + clip) * gain)
    tokens = out_mask.sum().clamp(min=1)
    loss = -(objective * out_mask).sum() / tokens
    optimiser.zero_grad()
    torch.autograd.backward(loss)
    optimiser.step()
    with torch.no_grad():
        mean_ratio = float((ratio * out_mask).sum() / tokens)
        clipped = float((((ratio - 1).abs() > clip).float() * out_mask).sum() / tokens)
    return float(loss.item()), mean_ratio, clipped


@torch.no_grad()
def generate_greedy(
    folder: Path | None,
    conversations: Sequence[Conversation],
    *,
    base_model: str,
    max_new_tokens: int,
    threads: int = 1,
) -> list[str]:
    """Greedy answers (the engine's decoding at temperature 0), decoded without specials;
    ``folder`` may be full weights or a LoRA adapter over ``base_model``."""
    with torch_threads(threads):
        model, tokenizer = load_serving(folder, base_model)
        model.train(False)
        prompts = [prompt_ids(tokenizer, c) for c in conversations]
        eos = int(tokenizer.eos_token_id)
        answers: dict[int, list[int]] = {}
        by_length: dict[int, list[int]] = {}
        for index, ids in enumerate(prompts):
            by_length.setdefault(len(ids), []).append(index)
        for indices in by_length.values():  # equal lengths: a batch needs no padding
            outputs = _greedy_batch(model, [prompts[i] for i in indices], eos, max_new_tokens)
            answers.update(zip(indices, outputs, strict=True))
    return [
        str(tokenizer.decode(answers[i], skip_special_tokens=True)) for i in range(len(prompts))
    ]


def _greedy_batch(
    model: torch.nn.Module, prompts: list[list[int]], eos: int, max_new_tokens: int
) -> list[list[int]]:
    sequence = torch.tensor(prompts)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    produced: list[list[int]] = [[] for _ in prompts]
    for _ in range(max_new_tokens):
        logits = model(input_ids=sequence, use_cache=False).logits[:, -1]
        chosen = torch.argmax(logits, dim=-1)
        for row, token in enumerate(chosen.tolist()):
            if not done[row] and token != eos:
                produced[row].append(int(token))
        done |= chosen == eos
        if bool(done.all()):
            break
        sequence = torch.cat([sequence, chosen[:, None]], dim=1)
    return produced
