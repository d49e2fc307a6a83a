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

Training and evaluation run where ``training.device`` says, under its compute dtype,
in micro-batches of ``training.micro_batch_tokens`` (:mod:`trainers.backends.devices`).
An example is the engine's token ids: the prompt is the model's chat template applied
with the generation prompt (what the engine feeds the model), then the answer's tokens
and the end-of-turn (eos) token the engine stops at; only those carry a loss.
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
from recipes.rendering import Trajectory, render
from reef.modelkit.errors import ModelFolderError
from reef.modelkit.folders import check_model_pair
from reef.modelkit.tiny import BUILTIN_MODELS, build_model, build_tokenizer, make_portable
from trainers.backends.devices import Placement, enable_checkpointing, micro_batches

if TYPE_CHECKING:
    from recipes.training import DeviceSettings, Example, GrpoTraining, Rollout, SftTraining

Conversation = Sequence[Mapping[str, str]]
#: one encoded example: (input ids, labels)
Row = tuple[list[int], list[int]]
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
        tokenizer = (
            build_tokenizer()
            if builtin
            else AutoTokenizer.from_pretrained(path, local_files_only=True)
        )
    except (OSError, ValueError) as exc:
        raise TrainingError(f"cannot load model folder {path}: {exc}") from exc
    try:
        check_model_pair(model, tokenizer, str(path))
    except ModelFolderError as exc:
        raise TrainingError(str(exc)) from exc
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


def encode_examples(
    tokenizer: Any, examples: Sequence[Example], max_length: int
) -> tuple[list[Row], dict[str, float]]:
    """Rows for every example, and what the context rule cut (``context_cut_messages``,
    ``context_cut_tokens``): a (conversation, target) pair is its prompt and the target;
    a :class:`~recipes.rendering.Trajectory` is rendered with its tools, the loss on its
    trained assistant spans (:func:`recipes.rendering.render`)."""
    rows: list[Row] = []
    cut_messages = cut_tokens = 0
    for example in examples:
        if isinstance(example, Trajectory):
            try:
                rendered = render(tokenizer, example, max_length)
            except ValueError as exc:
                raise TrainingError(str(exc)) from exc
            rows.append((rendered.ids, rendered.labels))
            cut_messages += rendered.cut_messages
            cut_tokens += rendered.cut_tokens
        else:
            rows.append(encode_example(tokenizer, example[0], example[1], max_length))
    return rows, {
        "context_cut_messages": float(cut_messages),
        "context_cut_tokens": float(cut_tokens),
    }


def _padded(rows: Sequence[Row], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in rows])
    labels = torch.tensor([lab + [IGNORE] * (width - len(lab)) for _, lab in rows])
    mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in rows])
    return ids, labels, mask


def pad_id(tokenizer: Any) -> int:
    return int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)


def save_candidate(model: torch.nn.Module, tokenizer: Any, out_dir: Path) -> None:
    """An HF folder the engine loads (weights moved to the CPU first)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    saver: Any = model.to("cpu")  # transformers' save_pretrained is untyped
    saver.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    make_portable(out_dir)


def train_sft(
    parent: Path | None,
    examples: Sequence[Example],
    out_dir: Path,
    options: SftTraining,
) -> dict[str, float]:
    """Fine-tune the parent's full weights on the examples; save an HF folder to ``out_dir``."""
    started = time.perf_counter()
    place = Placement.of_settings(options)
    with torch_threads(options.threads), place.seeded(options.seed):
        model, tokenizer = load(parent, options.base_model)
        rows, cuts = encode_examples(tokenizer, examples, options.max_length)
        losses = optimise(model.to(place.device), rows, options, place, pad=pad_id(tokenizer))
        save_candidate(model, tokenizer, out_dir)
    return {
        **cuts,
        "examples": float(len(examples)),
        "steps": float(options.steps),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "train_seconds": time.perf_counter() - started,
    }


def optimise(
    model: torch.nn.Module,
    rows: Sequence[Row],
    options: SftTraining,
    place: Placement,
    *,
    pad: int,
) -> list[float]:
    """``options.steps`` full-batch AdamW steps on the trainable parameters (all of a
    full model's, the adapter's of a PEFT model), each accumulated over micro-batches;
    the loss per step."""
    model.train(True)
    if options.gradient_checkpointing:
        enable_checkpointing(model)
    optimiser = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=options.learning_rate,
        weight_decay=options.weight_decay,
    )
    chunks = sft_micro_batches(rows, options, pad)
    losses = []
    for _ in range(options.steps):
        optimiser.zero_grad()
        losses.append(accumulate_sft(model, chunks, place))
        optimiser.step()
    model.train(False)
    return losses


def sft_micro_batches(
    rows: Sequence[Row], options: DeviceSettings, pad: int
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The rows padded, in order, in micro-batches of at most ``micro_batch_tokens``."""
    cuts = micro_batches([len(ids) for ids, _ in rows], options.micro_batch_tokens)
    return [_padded([rows[i] for i in cut], pad) for cut in cuts]


def accumulate_sft(
    model: torch.nn.Module,
    chunks: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    place: Placement,
) -> float:
    """Backward of the mean token loss over all the chunks (gradients accumulate).

    The tokens every row of a micro-batch starts with, and trains none of (an agent's
    system prompt and tools, repeated in every trajectory), run through the model once
    for the micro-batch: the rows continue from that one computation (its keys and values
    repeated per row), so the loss and the gradient are the full computation's while the
    work shrinks with the shared prompt. Not under gradient checkpointing, which keeps
    no keys and values."""
    tokens = max(sum(int((labels[:, 1:] != IGNORE).sum()) for _, labels, _ in chunks), 1)
    checkpointing = bool(getattr(model, "is_gradient_checkpointing", False))
    total = 0.0
    for ids, labels, mask in chunks:
        ids, labels, mask = (t.to(place.device) for t in (ids, labels, mask))
        shared = 0 if checkpointing else shared_prefix(ids, labels, mask)
        with place.autocast():
            if shared:
                logits, target = _logits_after_prefix(model, ids, mask, shared), labels[:, shared:]
            else:
                logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1]
                target = labels[:, 1:]
        loss = (
            torch.nn.functional.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]),
                target.reshape(-1),
                ignore_index=IGNORE,
                reduction="sum",
            )
            / tokens
        )
        torch.autograd.backward(loss)
        total += float(loss.item())
    return total


#: the shortest shared prefix computed once. The result equals the full pass's up to
#: float rounding (attention sums in another order), not bit for bit, so short prompts,
#: cheap either way, keep the full pass and train to exactly the weights they always did
MIN_SHARED_PREFIX = 128


def shared_prefix(ids: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> int:
    """How many leading tokens every row of a micro-batch has alike with no loss on any
    of them (a label at position t is predicted at t - 1: none up to the prefix's end),
    leaving each row one token of its own; 0 when fewer than ``MIN_SHARED_PREFIX`` or
    a single row."""
    if ids.shape[0] < 2:
        return 0
    differs = (ids != ids[:1]).any(dim=0).nonzero()
    common = int(differs[0]) if len(differs) else ids.shape[1]
    common = min(common, int(mask.sum(dim=1).min()) - 1)
    trained = (labels != IGNORE).any(dim=0).nonzero()
    if len(trained):
        common = min(common, int(trained[0]))
    return common if common >= MIN_SHARED_PREFIX else 0


def _logits_after_prefix(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, shared: int
) -> torch.Tensor:
    """The logits predicting positions ``shared`` to the end of every row, the shared
    prefix computed once (for the first row) and its cache repeated for the others."""
    head = model(input_ids=ids[:1, :shared], use_cache=True)
    cache = head.past_key_values
    cache.batch_repeat_interleave(ids.shape[0])
    rest = model(
        input_ids=ids[:, shared:], attention_mask=mask, past_key_values=cache, use_cache=True
    ).logits
    first = head.logits[:, -1:].expand(ids.shape[0], -1, -1)
    return torch.cat([first, rest[:, :-1]], dim=1)


def train_grpo(
    parent: Path | None, rollouts: Sequence[Rollout], out_dir: Path, options: GrpoTraining
) -> dict[str, float]:
    """Clipped policy-gradient steps on recorded rollouts; save an HF folder to ``out_dir``."""
    started = time.perf_counter()
    place = Placement.of_settings(options)
    with torch_threads(options.threads), place.seeded(options.seed):
        model, tokenizer = load(parent, options.base_model)
        model.to(place.device).train(True)
        if options.gradient_checkpointing:
            enable_checkpointing(model)
        cuts = micro_batches(
            [len(r.prompt_ids) + len(r.output_ids) for r in rollouts], options.micro_batch_tokens
        )
        chunks = [_rollout_tensors([rollouts[i] for i in cut], pad_id(tokenizer)) for cut in cuts]
        optimiser = torch.optim.AdamW(model.parameters(), lr=options.learning_rate)
        history = [
            _grpo_step(model, optimiser, chunks, options.clip, place) for _ in range(options.steps)
        ]
        model.train(False)
        save_candidate(model, tokenizer, out_dir)
    return {
        "rollouts": float(len(rollouts)),
        "steps": float(options.steps),
        "loss_first": history[0][0],
        "loss_last": history[-1][0],
        "ratio_first": history[0][1],
        "clipped_last": history[-1][2],
        "train_seconds": time.perf_counter() - started,
    }


RolloutTensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _rollout_tensors(rollouts: Sequence[Rollout], pad: int) -> RolloutTensors:
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
    chunks: Sequence[RolloutTensors],
    clip: float,
    place: Placement,
) -> tuple[float, float, float]:
    """One step over all the chunks: (loss, mean ratio, clipped fraction) per output token."""
    tokens = max(float(sum(float(c[2].sum()) for c in chunks)), 1.0)
    optimiser.zero_grad()
    loss_sum = ratio_sum = clipped_sum = 0.0
    for chunk in chunks:
        ids, mask, out_mask, old, advantages = (t.to(place.device) for t in chunk)
        with place.autocast():
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1]
        new = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        ratio = torch.exp((new - old) * out_mask)
        gain = advantages[:, None]
        objective = torch.minimum(ratio * gain, torch.clamp(ratio, 1 - clip, 1 + clip) * gain)
        loss = -(objective * out_mask).sum() / tokens
        torch.autograd.backward(loss)
        loss_sum += float(loss.item())
        with torch.no_grad():
            ratio_sum += float((ratio * out_mask).sum())
            clipped_sum += float((((ratio - 1).abs() > clip).float() * out_mask).sum())
    optimiser.step()
    return loss_sum, ratio_sum / tokens, clipped_sum / tokens


@torch.no_grad()
def generate_greedy(
    folder: Path | None,
    conversations: Sequence[Conversation],
    *,
    base_model: str,
    max_new_tokens: int,
    threads: int = 1,
    device: str = "cpu",
    dtype: str = "auto",
) -> list[str]:
    """Greedy answers (the engine's decoding at temperature 0), decoded without specials;
    ``folder`` may be full weights or a LoRA adapter over ``base_model``."""
    place = Placement.of(device, dtype)
    with torch_threads(threads):
        model, tokenizer = load_serving(folder, base_model)
        model.to(place.device).train(False)
        prompts = [prompt_ids(tokenizer, c) for c in conversations]
        eos = int(tokenizer.eos_token_id)
        answers: dict[int, list[int]] = {}
        by_length: dict[int, list[int]] = {}
        for index, ids in enumerate(prompts):
            by_length.setdefault(len(ids), []).append(index)
        for indices in by_length.values():  # equal lengths: a batch needs no padding
            batch = [prompts[i] for i in indices]
            with place.autocast():
                outputs = _greedy_batch(model, batch, eos, max_new_tokens, place.device)
            answers.update(zip(indices, outputs, strict=True))
    return [
        str(tokenizer.decode(answers[i], skip_special_tokens=True)) for i in range(len(prompts))
    ]


def _greedy_batch(
    model: torch.nn.Module,
    prompts: list[list[int]],
    eos: int,
    max_new_tokens: int,
    device: torch.device | None = None,
) -> list[list[int]]:
    sequence = torch.tensor(prompts, device=device)
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
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
