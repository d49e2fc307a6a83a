"""``openclaw_rl`` in-process: a policy trained on judged turns (PPO + top-K distillation).

Order of one candidate: load the parent's policy -> with it still untouched (the frozen
teacher: the parent release's weights at the start of the step), compute each hinted
turn's teacher log-probs over its recorded top-K ids, reading the prompt with the hint
and the turn's own response ids (forward only, no gradient) -> for each epoch and
minibatch, one AdamW step on ``PPO + distill_coef * distillation`` -> save.

Positions are the generated tokens of each turn: the logits at ``prompt + t - 1``
predict output token ``t`` (:func:`output_logprobs`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from recipes.errors import TrainingError
from reef.modelkit.tiny import make_portable
from trainers.backends.openclaw_rl_math import (
    ppo_clip_loss,
    restricted_log_softmax,
    topk_distill_loss,
)
from trainers.backends.torch_backend import load, prompt_ids, torch_threads

if TYPE_CHECKING:
    from recipes.openclaw_rl.training import JudgedTurn, OpenClawTraining


@dataclass(frozen=True, slots=True)
class TurnTensors:
    """A minibatch, padded: inputs, and per generated position the recorded values."""

    ids: torch.Tensor
    attention: torch.Tensor
    prompt_lengths: tuple[int, ...]
    output_ids: torch.Tensor
    old_logprobs: torch.Tensor
    mask: torch.Tensor
    rewards: torch.Tensor
    top_ids: torch.Tensor
    top_mask: torch.Tensor
    distilled: torch.Tensor
    teacher: torch.Tensor


def _pad(rows: Sequence[Sequence[Any]], width: int, fill: Any) -> list[list[Any]]:
    return [list(r) + [fill] * (width - len(r)) for r in rows]


def turn_tensors(
    turns: Sequence[JudgedTurn],
    teacher: Sequence[torch.Tensor | None],
    pad: int,
    baseline: float = 0.0,
) -> TurnTensors:
    """The minibatch's tensors; each row's advantage is its reward minus ``baseline``."""
    width = max(len(t.prompt_ids) + len(t.output_ids) for t in turns)
    length = max(len(t.output_ids) for t in turns)
    k = max([len(ids) for t in turns for ids in t.top_ids] or [1])
    full = [list(t.prompt_ids) + list(t.output_ids) for t in turns]
    top = torch.zeros(len(turns), length, k, dtype=torch.long)
    top_mask = torch.zeros(len(turns), length, k)
    targets = torch.zeros(len(turns), length, k)
    for row, (turn, known) in enumerate(zip(turns, teacher, strict=True)):
        for t, ids in enumerate(turn.top_ids):
            top[row, t, : len(ids)] = torch.tensor(ids)
            top_mask[row, t, : len(ids)] = 1.0
        if known is not None:
            targets[row, : known.shape[0], : known.shape[1]] = known
    return TurnTensors(
        ids=torch.tensor(_pad(full, width, pad)),
        attention=torch.tensor(_pad([[1] * len(r) for r in full], width, 0)),
        prompt_lengths=tuple(len(t.prompt_ids) for t in turns),
        output_ids=torch.tensor(_pad([t.output_ids for t in turns], length, pad)),
        old_logprobs=torch.tensor(_pad([t.logprobs for t in turns], length, 0.0)),
        mask=torch.tensor(_pad([[1.0] * len(t.output_ids) for t in turns], length, 0.0)),
        rewards=torch.tensor([t.score - baseline for t in turns]),
        top_ids=top,
        top_mask=top_mask,
        distilled=torch.tensor([1.0 if t.distilled else 0.0 for t in turns]),
        teacher=targets,
    )


def output_logprobs(
    model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor, prompts: Sequence[int]
) -> torch.Tensor:
    """Full-vocabulary log-probs ``[rows, positions, V]`` at each generated position."""
    logprobs = torch.log_softmax(model(input_ids=ids, attention_mask=attention).logits, dim=-1)
    length = int(attention.sum(-1).max()) - min(prompts)
    rows = []
    for row, prompt in enumerate(prompts):
        part = logprobs[row, prompt - 1 : prompt - 1 + length]
        fill = length - part.shape[0]
        rows.append(torch.nn.functional.pad(part, (0, 0, 0, fill)) if fill else part)
    return torch.stack(rows)


@torch.no_grad()
def teacher_targets(
    model: torch.nn.Module, tokenizer: Any, turns: Sequence[JudgedTurn]
) -> list[torch.Tensor | None]:
    """Per hinted turn, the frozen teacher's log-probs renormalised over the recorded
    top-K ids ``[outputs, K]`` given the hinted prompt and the turn's response ids."""
    found: list[torch.Tensor | None] = []
    for turn in turns:
        if turn.teacher_messages is None:
            found.append(None)
            continue
        messages = [{"role": r, "content": c} for r, c in turn.teacher_messages]
        prompt = prompt_ids(tokenizer, messages)
        ids = torch.tensor([prompt + list(turn.output_ids)])
        full = output_logprobs(model, ids, torch.ones_like(ids), [len(prompt)])[0]
        k = max(len(t) for t in turn.top_ids)
        top = torch.tensor([list(t) + [0] * (k - len(t)) for t in turn.top_ids])
        mask = torch.tensor([[1.0] * len(t) + [0.0] * (k - len(t)) for t in turn.top_ids])
        found.append(restricted_log_softmax(full[: len(turn.output_ids)], top, mask))
    return found


@dataclass
class History:
    losses: list[float] = field(default_factory=list)
    ppo: list[float] = field(default_factory=list)
    distill: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    clipped: list[float] = field(default_factory=list)


def train_openclaw_rl(
    parent: Path | None,
    turns: Sequence[JudgedTurn],
    out_dir: Path,
    options: OpenClawTraining,
) -> dict[str, float]:
    """Train the parent's policy on judged turns; save it into ``out_dir``."""
    if not turns:
        raise TrainingError("openclaw_rl needs at least one judged turn")
    started = time.perf_counter()
    with torch_threads(options.threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.seed)
        policy, tokenizer = load(parent, options.base_model)
        policy.train(False)
        teacher = teacher_targets(policy, tokenizer, turns)  # before any update: frozen
        pad = int(tokenizer.pad_token_id or 0)
        size = options.minibatch
        baseline = reward_baseline(turns, options)
        batches = [
            turn_tensors(turns[i : i + size], teacher[i : i + size], pad, baseline)
            for i in range(0, len(turns), size)
        ]
        history = _optimise(policy, batches, options)
        out_dir.mkdir(parents=True, exist_ok=True)
        saver: Any = policy
        saver.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
        make_portable(out_dir)
    metrics = _metrics(turns, history) | {"baseline": baseline}
    return metrics | {"train_seconds": time.perf_counter() - started}


def reward_baseline(turns: Sequence[JudgedTurn], options: OpenClawTraining) -> float:
    """What every turn's advantage subtracts from its reward (``options.baseline``)."""
    if options.baseline == "batch_mean":
        return sum(t.score for t in turns) / len(turns)
    return 0.0


def _optimise(
    policy: torch.nn.Module, batches: Sequence[TurnTensors], options: OpenClawTraining
) -> History:
    optimiser = torch.optim.AdamW(policy.parameters(), lr=options.learning_rate)
    history = History()
    policy.train(True)
    for _ in range(options.epochs):
        for batch in batches:
            loss = _loss(policy, batch, options, history)
            optimiser.zero_grad()
            torch.autograd.backward(loss)
            optimiser.step()
            history.losses.append(float(loss.detach()))
    policy.train(False)
    return history


def _loss(
    policy: torch.nn.Module, batch: TurnTensors, options: OpenClawTraining, history: History
) -> torch.Tensor:
    full = output_logprobs(policy, batch.ids, batch.attention, batch.prompt_lengths)
    chosen = full.gather(-1, batch.output_ids[..., None]).squeeze(-1)
    ppo, ratio, clipped = ppo_clip_loss(
        chosen,
        batch.old_logprobs,
        batch.rewards,
        batch.mask,
        eps_low=options.clip_eps,
        eps_high=options.upper_clip,
        log_ratio_clamp=options.log_ratio_clamp,
    )
    history.ppo.append(float(ppo.detach()))
    history.ratios.append(ratio)
    history.clipped.append(clipped)
    if options.distill_coef <= 0 or not bool(batch.distilled.any()):
        return ppo
    student = restricted_log_softmax(full, batch.top_ids, batch.top_mask)
    positions = batch.mask * batch.distilled[:, None]
    distill = topk_distill_loss(student, batch.teacher, batch.top_mask, positions)
    history.distill.append(float(distill.detach()))
    return ppo + options.distill_coef * distill


def _metrics(turns: Sequence[JudgedTurn], history: History) -> dict[str, float]:
    found = {
        "steps": float(len(history.losses)),
        "reward_mean": sum(t.score for t in turns) / len(turns),
        "distilled_turns": float(sum(t.distilled for t in turns)),
        "loss_first": history.losses[0],
        "loss_last": history.losses[-1],
        "ppo_first": history.ppo[0],
        "ratio_first": history.ratios[0],
        "clipped_last": history.clipped[-1],
    }
    if history.distill:
        found |= {"distill_first": history.distill[0], "distill_last": history.distill[-1]}
    return found
