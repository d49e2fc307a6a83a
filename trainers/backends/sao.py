"""``sao`` in-process: a policy and its critic trained from single scored rollouts.

The critic is a value model: a copy of the policy's decoder (its ``base_model``) with a
scalar head, zero-initialised so its first values are 0. It lives in the release under
``sao-critic/`` (``value.safetensors`` and ``state.json``, the optimiser steps the
release line has taken, which the warm-up counts), never beside the policy's weights,
which the engine reads as ``*.safetensors`` of the folder's top level. A parent without
one (the creation release, a warm start) gets a fresh critic from its own decoder.

Order of one candidate: load the parent's policy and critic -> for each epoch and step:
compute the step's advantages and returns with the critic as trained so far (so the
warm-up's critic, not the zero head, judges the first policy update), then
``critic_steps_per_actor`` critic updates, then one DIS policy update unless the line is
still within ``warmup_steps`` -> save both.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from recipes.errors import TrainingError
from recipes.sao.training import CRITIC_DIR
from reef.modelkit.tiny import make_portable
from trainers.backends.sao_math import (
    dis_loss,
    explained_variance,
    skip_observation_gae,
    value_loss,
)
from trainers.backends.torch_backend import load, torch_threads

if TYPE_CHECKING:
    from recipes.sao.training import SaoTraining, ScoredRollout

VALUE_FILE = "value.safetensors"
STATE_FILE = "state.json"


class ValueModel(torch.nn.Module):
    """A decoder with a scalar head: one value per position."""

    def __init__(self, decoder: torch.nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.decoder = decoder
        self.head = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = self.decoder(input_ids=ids, attention_mask=mask).last_hidden_state
        values: torch.Tensor = self.head(hidden).squeeze(-1)
        return values


def load_critic(parent: Path | None, policy: torch.nn.Module) -> tuple[ValueModel, int]:
    """The parent's critic and the optimiser steps its line took, else a fresh one."""
    model: Any = policy  # a transformers model: untyped
    critic = ValueModel(copy.deepcopy(model.base_model), int(model.config.hidden_size))
    folder = parent / CRITIC_DIR if parent is not None else None
    if folder is None or not (folder / VALUE_FILE).is_file():
        return critic, 0
    try:
        critic.load_state_dict(load_file(folder / VALUE_FILE))
        steps = int(json.loads((folder / STATE_FILE).read_text())["steps"])
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise TrainingError(f"cannot load the sao critic of {parent}: {exc}") from exc
    return critic, steps


def save_critic(critic: ValueModel, steps: int, out_dir: Path) -> None:
    folder = out_dir / CRITIC_DIR
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in critic.state_dict().items()}
    save_file(tensors, folder / VALUE_FILE)
    (folder / STATE_FILE).write_text(json.dumps({"steps": steps}) + "\n")


@dataclass(frozen=True, slots=True)
class StepTensors:
    """One step's rollouts, padded; every per-position tensor is in target positions."""

    ids: torch.Tensor
    attention: torch.Tensor
    actions: torch.Tensor
    rollout_logprobs: torch.Tensor
    rewards: torch.Tensor
    lams: tuple[float, ...]


def step_tensors(rollouts: Sequence[ScoredRollout], pad: int) -> StepTensors:
    width = max(len(r.token_ids) for r in rollouts)
    ids, attention, actions, old, rewards = [], [], [], [], []
    for r in rollouts:
        fill = width - len(r.token_ids)
        ids.append(list(r.token_ids) + [pad] * fill)
        attention.append([1] * len(r.token_ids) + [0] * fill)
        mask = list(r.action_mask[1:]) + [0] * fill
        actions.append(mask)
        old.append(list(r.logprobs[1:]) + [0.0] * fill)
        last = max(t for t, m in enumerate(mask) if m)
        rewards.append([r.score if t == last else 0.0 for t in range(width - 1)])
    return StepTensors(
        torch.tensor(ids),
        torch.tensor(attention),
        torch.tensor(actions, dtype=torch.float32),
        torch.tensor(old),
        torch.tensor(rewards),
        tuple(r.lam for r in rollouts),
    )


def policy_logprobs(policy: torch.nn.Module, batch: StepTensors) -> torch.Tensor:
    logits = policy(input_ids=batch.ids, attention_mask=batch.attention).logits[:, :-1]
    chosen: torch.Tensor = (
        torch.log_softmax(logits, dim=-1).gather(-1, batch.ids[:, 1:, None]).squeeze(-1)
    )
    return chosen


def critic_values(critic: ValueModel, batch: StepTensors) -> torch.Tensor:
    values: torch.Tensor = critic(batch.ids, batch.attention)[:, :-1] * batch.actions
    return values


@dataclass(frozen=True, slots=True)
class Targets:
    advantages: torch.Tensor
    returns: torch.Tensor


@torch.no_grad()
def targets_of(critic: ValueModel, batch: StepTensors, options: SaoTraining) -> Targets:
    """Policy advantages (length-adaptive lambda per row) and the critic's returns."""
    values = critic_values(critic, batch)
    advantages, _ = skip_observation_gae(
        batch.rewards, values, batch.actions, gamma=options.gamma, lams=batch.lams
    )
    _, returns = skip_observation_gae(
        batch.rewards,
        values,
        batch.actions,
        gamma=options.gamma,
        lams=[options.critic_lambda] * len(batch.lams),
    )
    return Targets(advantages, returns)


@dataclass
class History:
    """What the metrics report: per update, in order."""

    value_losses: list[float]
    policy_losses: list[float]
    ratios: list[float]
    masked: list[float]


def train_sao(
    parent: Path | None,
    steps: Sequence[Sequence[ScoredRollout]],
    out_dir: Path,
    options: SaoTraining,
) -> dict[str, float]:
    """Train the parent's policy and critic on ``steps``; save both into ``out_dir``."""
    if not steps or not all(steps):
        raise TrainingError("sao needs at least one rollout per step")
    started = time.perf_counter()
    with torch_threads(options.threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.seed)
        policy, tokenizer = load(parent, options.base_model)
        critic, done = load_critic(parent, policy)
        batches = [step_tensors(s, int(tokenizer.pad_token_id or 0)) for s in steps]
        history, done_after = _optimise(policy, critic, batches, done, options)
        ev = _explained(critic, batches, options)
        out_dir.mkdir(parents=True, exist_ok=True)
        saver: Any = policy
        saver.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
        make_portable(out_dir)
        save_critic(critic, done_after, out_dir)
    return _metrics(steps, history, done, done_after, ev, options) | {
        "train_seconds": time.perf_counter() - started
    }


def _optimise(
    policy: torch.nn.Module,
    critic: ValueModel,
    batches: Sequence[StepTensors],
    done: int,
    options: SaoTraining,
) -> tuple[History, int]:
    actor = torch.optim.AdamW(policy.parameters(), lr=options.learning_rate)
    value = torch.optim.AdamW(critic.parameters(), lr=options.critic_learning_rate)
    history = History([], [], [], [])
    policy.train(True)
    critic.train(True)
    for _ in range(options.epochs):
        for batch in batches:
            target = targets_of(critic, batch, options)  # judged by the critic so far
            for _ in range(options.critic_steps_per_actor):
                loss = value_loss(critic_values(critic, batch), target.returns, batch.actions)
                _update(value, loss)
                history.value_losses.append(float(loss.detach()))
            if done >= options.warmup_steps:
                _actor_update(policy, actor, batch, target, options, history)
            done += 1
    policy.train(False)
    critic.train(False)
    return history, done


def _actor_update(
    policy: torch.nn.Module,
    optimiser: torch.optim.Optimizer,
    batch: StepTensors,
    target: Targets,
    options: SaoTraining,
    history: History,
) -> None:
    loss, ratio, masked = dis_loss(
        policy_logprobs(policy, batch),
        batch.rollout_logprobs,
        target.advantages,
        batch.actions,
        eps_low=options.eps_low,
        eps_high=options.eps_high,
    )
    _update(optimiser, loss)
    history.policy_losses.append(float(loss.detach()))
    history.ratios.append(ratio)
    history.masked.append(masked)


def _update(optimiser: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    optimiser.zero_grad()
    torch.autograd.backward(loss)
    optimiser.step()


@torch.no_grad()
def _explained(critic: ValueModel, batches: Sequence[StepTensors], options: SaoTraining) -> float:
    """The trained critic's explained variance of its targets (all steps)."""
    values = [critic_values(critic, b).flatten() for b in batches]
    returns = [targets_of(critic, b, options).returns.flatten() for b in batches]
    masks = [b.actions.flatten() for b in batches]
    return explained_variance(torch.cat(values), torch.cat(returns), torch.cat(masks))


def _metrics(
    steps: Sequence[Sequence[ScoredRollout]],
    history: History,
    before: int,
    after: int,
    ev: float,
    options: SaoTraining,
) -> dict[str, float]:
    scores = [r.score for step in steps for r in step]
    found = {
        "steps": float(after - before),
        "policy_steps": float(len(history.policy_losses)),
        "warmup_left": float(max(0, options.warmup_steps - after)),
        "score_mean": sum(scores) / len(scores),
        "value_loss_first": history.value_losses[0],
        "value_loss_last": history.value_losses[-1],
        "critic_explained_variance": ev,
    }
    if history.policy_losses:
        found |= {
            "loss_first": history.policy_losses[0],
            "loss_last": history.policy_losses[-1],
            "ratio_first": history.ratios[0],
            "masked_last": history.masked[-1],
        }
    return found
