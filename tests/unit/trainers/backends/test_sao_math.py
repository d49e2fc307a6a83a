"""The tensor math of ``sao`` on small tensors: skip-observation GAE, the DIS mask and
loss, and the critic-only warm-up on the built-in tiny model."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from recipes.sao.training import CRITIC_DIR, SaoTraining, ScoredRollout
from trainers.backends.sao import train_sao
from trainers.backends.sao_math import dis_loss, dis_mask, skip_observation_gae

# target positions: two generated tokens, two observation tokens (a tool result), two
# generated tokens; the reward 1 sits on the last generated token
MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 1.0]])
VALUES = torch.tensor([[0.5, 0.4, 9.0, 9.0, 0.3, 0.2]])  # 9.0: must never be used
REWARDS = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]])


def test_gae_skips_observation_tokens_and_bridges_the_gap() -> None:
    """By hand, gamma 1, lambda 0.5, backwards over generated tokens only:
    t5: delta = 1 - 0.2 = 0.8, A = 0.8; t4: delta = 0.2 - 0.3 = -0.1, A = -0.1 + 0.4 = 0.3;
    t3, t2 skipped (A = 0); t1: delta = 0.3 - 0.4 = -0.1 (V_next is t4's, across the
    gap), A = -0.1 + 0.15 = 0.05; t0: delta = 0.4 - 0.5 = -0.1, A = -0.1 + 0.025 = -0.075.
    Returns are A + V on generated tokens."""
    advantages, returns = skip_observation_gae(REWARDS, VALUES, MASK, gamma=1.0, lams=[0.5])
    expected = torch.tensor([[-0.075, 0.05, 0.0, 0.0, 0.3, 0.8]])
    assert torch.allclose(advantages, expected, atol=1e-6), advantages
    assert torch.allclose(returns, torch.tensor([[0.425, 0.45, 0.0, 0.0, 0.6, 1.0]]), atol=1e-6)


def test_gae_with_lambda_one_gives_monte_carlo_returns() -> None:
    """The critic's targets (critic_lambda 1, gamma 1): the final reward on every
    generated token, whatever the values."""
    _, returns = skip_observation_gae(REWARDS, VALUES, MASK, gamma=1.0, lams=[1.0])
    assert torch.allclose(returns, torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 1.0]]), atol=1e-6)


def test_gae_discounts_per_generated_token_only() -> None:
    """gamma 0.5, lambda 1, zero values: the reward halves per *generated* token back
    (the two observation tokens are not steps of the policy)."""
    zeros = torch.zeros_like(VALUES)
    advantages, _ = skip_observation_gae(REWARDS, zeros, MASK, gamma=0.5, lams=[1.0])
    expected = torch.tensor([[0.125, 0.25, 0.0, 0.0, 0.5, 1.0]])
    assert torch.allclose(advantages, expected, atol=1e-6), advantages


def test_dis_mask_keeps_ratios_strictly_inside_the_interval() -> None:
    low, high = 0.3, 5.0
    ratios = torch.tensor(
        [1 - low, math.nextafter(1 - low, 2.0), 1.0, math.nextafter(1 + high, 0.0), 1 + high],
        dtype=torch.float64,
    )
    assert dis_mask(ratios, low, high).tolist() == [False, True, True, True, False]


def test_dis_loss_gives_no_gradient_outside_the_interval_nor_off_the_actions() -> None:
    """Ratios 0.5 (below 1 - 0.3), 1.2 (inside), 7.0 (above 1 + 5.0) and an observation
    token: only the 1.2 token has a gradient, -r * A / (action tokens) = -1.2 * 2 / 3."""
    new = torch.log(torch.tensor([0.5, 1.2, 7.0, 1.0])).requires_grad_(True)
    old = torch.zeros(4)
    advantages = torch.tensor([1.0, 2.0, 3.0, 4.0])
    actions = torch.tensor([1.0, 1.0, 1.0, 0.0])
    loss, mean_ratio, masked = dis_loss(new, old, advantages, actions, eps_low=0.3, eps_high=5.0)
    torch.autograd.backward(loss)
    assert new.grad is not None
    assert torch.allclose(new.grad, torch.tensor([0.0, -0.8, 0.0, 0.0]), atol=1e-6), new.grad
    assert masked == pytest.approx(2 / 3)
    assert mean_ratio == pytest.approx((0.5 + 1.2 + 7.0) / 3)
    assert float(loss.detach()) == pytest.approx(-1.2 * 2.0 * math.log(1.2) / 3)


# ---------------------------------------------------------------------------- warm-up


def tiny_rollouts(count: int) -> list[ScoredRollout]:
    """On-policy rollouts of the tiny base: "Say <i>" answered by two letters and eos,
    with the base's own logprobs, scored 1 for even i."""
    from reef.modelkit.tiny import build_model, build_tokenizer
    from trainers.backends.torch_backend import prompt_ids

    model, tokenizer = build_model(), build_tokenizer()
    found = []
    for index in range(count):
        prompt = prompt_ids(tokenizer, [{"role": "user", "content": f"say {index}"}])
        output = [*tokenizer("ab", add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        ids = prompt + output
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
        chosen = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])
        logprobs = [0.0] * len(prompt) + chosen.squeeze(-1)[len(prompt) - 1 :].tolist()
        found.append(
            ScoredRollout(
                tuple(ids),
                tuple([0] * len(prompt) + [1] * len(output)),
                tuple(logprobs),
                float(index % 2 == 0),
                f"p{index}",
                0.5,
            )
        )
    return found


def policy_weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def changed(a: dict[str, torch.Tensor], b: dict[str, Any]) -> bool:
    return any(not torch.equal(a[k], b[k]) for k in a)


def test_critic_only_warm_up_leaves_the_policy_unchanged_then_the_line_trains_it(
    tmp_path: Path,
) -> None:
    """Within the warm-up only the critic trains: the policy saved is the tiny base bit
    for bit. The steps taken are carried in the release, so a child with warmup_steps 3
    has one warm-up step left (its step 3) and then trains the policy (step 4)."""
    from reef.modelkit.tiny import build_model

    steps = [tiny_rollouts(4)]
    options = SaoTraining(epochs=2, learning_rate=1e-3)
    warm = tmp_path / "warm"
    metrics = train_sao(None, steps, warm, options.model_copy(update={"warmup_steps": 5}))
    assert metrics["policy_steps"] == 0 and metrics["warmup_left"] == 3, metrics
    assert not changed(policy_weights(warm), build_model().state_dict())
    fresh = {"head.weight", "head.bias"}
    critic = load_file(warm / CRITIC_DIR / "value.safetensors")
    assert any(float(critic[k].abs().sum()) > 0 for k in fresh)  # the zero head learned
    assert json.loads((warm / CRITIC_DIR / "state.json").read_text()) == {"steps": 2}

    child = tmp_path / "child"
    metrics = train_sao(warm, steps, child, options.model_copy(update={"warmup_steps": 3}))
    assert metrics["policy_steps"] == 1, metrics
    assert metrics["ratio_first"] == pytest.approx(1.0, abs=1e-4)  # on-policy rollouts
    assert changed(policy_weights(warm), policy_weights(child))
    assert changed(critic, load_file(child / CRITIC_DIR / "value.safetensors"))


def test_a_parent_without_a_critic_gets_a_fresh_one_valued_at_zero(tmp_path: Path) -> None:
    """The creation release has no critic: the fresh one (the policy's decoder, a zero
    head) values every position 0; the candidate keeps it under ``sao-critic/``, where the
    engine, which reads the top-level ``*.safetensors`` as weights, never looks."""
    from reef.modelkit.tiny import build_model
    from trainers.backends.sao import load_critic

    critic, steps = load_critic(None, build_model())
    values = critic(torch.tensor([[1, 5, 9, 2]]), torch.ones(1, 4, dtype=torch.long))
    assert steps == 0 and values.abs().sum().item() == 0.0
    out = tmp_path / "out"
    train_sao(None, [tiny_rollouts(2)], out, SaoTraining(epochs=1, warmup_steps=0))
    assert sorted(p.name for p in out.glob("*.safetensors")) == ["model.safetensors"]
    reloaded, steps = load_critic(out, build_model())
    assert steps == 1
    assert (
        reloaded(torch.tensor([[1, 5, 9, 2]]), torch.ones(1, 4, dtype=torch.long)).abs().sum() > 0
    )
