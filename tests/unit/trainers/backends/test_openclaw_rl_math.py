"""The tensor math of ``openclaw_rl`` on small tensors: the clipped PPO term and the
top-K distillation, by hand; and one candidate trained on the built-in tiny model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from recipes.openclaw_rl.training import JudgedTurn, OpenClawTraining
from trainers.backends.openclaw_rl import (
    output_logprobs,
    reward_baseline,
    train_openclaw_rl,
    turn_tensors,
)
from trainers.backends.openclaw_rl_math import (
    ppo_clip_loss,
    restricted_log_softmax,
    topk_distill_loss,
)
from trainers.backends.torch_backend import load, prompt_ids

# ratios 1.1, 1.5, 0.5 (and a padded position) for a +1 turn and a -1 turn
RATIOS = torch.tensor([[1.1, 1.5, 0.5, 3.0], [1.1, 1.5, 0.5, 3.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
REWARDS = torch.tensor([1.0, -1.0])


def test_the_clipped_ppo_term_by_hand() -> None:
    """eps 0.2 / 0.28, old logprobs 0 so r = exp(log pi).
    +1 turn: min(r, clip(r, 0.8, 1.28)) = 1.1, 1.28, 0.5;
    -1 turn: min(-r, -clip(r)) = -1.1, -1.5, -0.8.
    Loss = -(1.1 + 1.28 + 0.5 - 1.1 - 1.5 - 0.8) / 6 = 0.52 / 6; clipped: the +1 turn's
    1.5 and the -1 turn's 0.5 (2 of 6), and those get no gradient; elsewhere
    d loss / d log pi = -A * r / 6."""
    logprobs = RATIOS.log().requires_grad_(True)
    loss, mean_ratio, clipped = ppo_clip_loss(
        logprobs, torch.zeros_like(RATIOS), REWARDS, MASK, eps_low=0.2, eps_high=0.28
    )
    assert float(loss.detach()) == pytest.approx(0.52 / 6, abs=1e-6)
    assert clipped == pytest.approx(2 / 6)
    assert mean_ratio == pytest.approx((1.1 + 1.5 + 0.5) * 2 / 6, abs=1e-6)
    torch.autograd.backward(loss)
    assert logprobs.grad is not None
    expected = torch.tensor([[-1.1 / 6, 0.0, -0.5 / 6, 0.0], [1.1 / 6, 1.5 / 6, 0.0, 0.0]])
    assert torch.allclose(logprobs.grad, expected, atol=1e-6), logprobs.grad


def test_the_log_ratio_is_clamped() -> None:
    loss, ratio, _ = ppo_clip_loss(
        torch.tensor([[0.0]]),
        torch.tensor([[-100.0]]),
        torch.tensor([-1.0]),
        torch.tensor([[1.0]]),
        eps_low=0.2,
        eps_high=0.2,
        log_ratio_clamp=20.0,
    )
    assert ratio == pytest.approx(math.exp(20.0), rel=1e-5)
    assert math.isfinite(float(loss.detach()))


LOGITS_S = torch.tensor([[[2.0, 0.0, 1.0, 0.5, -1.0]]])  # one position, vocabulary of 5
LOGITS_T = torch.tensor([[[0.0, 3.0, 2.0, 0.0, 1.0]]])
TOP = torch.tensor([[[0, 2, 3, 0]]])  # K = 3 recorded ids and one padding slot
TOP_MASK = torch.tensor([[[1.0, 1.0, 1.0, 0.0]]])


def by_hand(logits: list[float], ids: list[int]) -> list[float]:
    """Softmax over the chosen ids only (the vocabulary's other ids do not matter)."""
    exps = [math.exp(logits[i]) for i in ids]
    return [e / sum(exps) for e in exps]


def test_the_top_k_distillation_renormalises_over_the_k_ids_by_hand() -> None:
    student = restricted_log_softmax(torch.log_softmax(LOGITS_S, -1), TOP, TOP_MASK)
    teacher = restricted_log_softmax(torch.log_softmax(LOGITS_T, -1), TOP, TOP_MASK)
    p_s = by_hand([2.0, 0.0, 1.0, 0.5, -1.0], [0, 2, 3])
    p_t = by_hand([0.0, 3.0, 2.0, 0.0, 1.0], [0, 2, 3])
    assert torch.allclose(student[0, 0, :3].exp(), torch.tensor(p_s), atol=1e-6)
    assert float(student[0, 0, 3]) == 0.0  # padding contributes nothing
    kl = sum(t * math.log(t / s) for t, s in zip(p_t, p_s, strict=True))
    loss = topk_distill_loss(student, teacher, TOP_MASK, torch.ones(1, 1))
    assert float(loss.detach()) == pytest.approx(kl, abs=1e-6)


def test_the_distillation_is_zero_with_zero_gradient_when_policy_equals_teacher() -> None:
    logits = LOGITS_S.clone().requires_grad_(True)
    student = restricted_log_softmax(torch.log_softmax(logits, -1), TOP, TOP_MASK)
    teacher = restricted_log_softmax(torch.log_softmax(LOGITS_S, -1), TOP, TOP_MASK)
    loss = topk_distill_loss(student, teacher, TOP_MASK, torch.ones(1, 1))
    torch.autograd.backward(loss)
    assert abs(float(loss.detach())) < 1e-7
    assert logits.grad is not None and float(logits.grad.abs().max()) < 1e-7


def test_the_distillation_moves_the_policy_toward_the_teacher_on_the_k_ids_only() -> None:
    logits = LOGITS_S.clone().requires_grad_(True)
    teacher = restricted_log_softmax(torch.log_softmax(LOGITS_T, -1), TOP, TOP_MASK)
    for _ in range(200):
        student = restricted_log_softmax(torch.log_softmax(logits, -1), TOP, TOP_MASK)
        loss = topk_distill_loss(student, teacher, TOP_MASK, torch.ones(1, 1))
        (grad,) = torch.autograd.grad(loss, logits)
        with torch.no_grad():
            logits -= 1.0 * grad
    assert float(loss.detach()) < 1e-3
    untouched = logits.detach()[0, 0, [1, 4]]  # the ids outside the K
    assert torch.allclose(untouched, LOGITS_S[0, 0, [1, 4]], atol=1e-5)


def tiny_answer(
    folder: Path | None = None,
) -> tuple[tuple[int, ...], tuple[int, ...], torch.Tensor]:
    """(prompt ids, output ids, log-probs ``[outputs, V]``) of the answer "kato" (its
    first 3 tokens) to "First letter of: kato", read by the built-in tiny model, or by the
    model saved in ``folder``."""
    model, tokenizer = load(folder, "tiny")
    prompt = prompt_ids(tokenizer, [{"role": "user", "content": "First letter of: kato"}])
    output = [int(t) for t in tokenizer.encode("kato", add_special_tokens=False)][:3]
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        full = output_logprobs(model, ids, torch.ones_like(ids), [len(prompt)])[0]
    return tuple(prompt), tuple(output), full


def answer_logprobs(full: torch.Tensor, output: tuple[int, ...]) -> tuple[float, ...]:
    """The log-prob of each output token, from the log-probs at its position."""
    return tuple(float(full[t, token]) for t, token in enumerate(output))


def test_one_candidate_on_the_tiny_model_trains_on_policy_and_distils(tmp_path: Path) -> None:
    """Turns recorded from the tiny model itself (so the first ratio is 1), one hinted:
    the teacher (the same weights given the hint) differs from the policy, so the
    distillation term is positive; the candidate is a loadable model folder."""
    prompt, output, full = tiny_answer()
    recorded = answer_logprobs(full, output)
    top = tuple(tuple(int(i) for i in full[t].topk(4).indices) for t in range(len(output)))
    hinted = (("user", "First letter of: kato\n\nHint: The user said: no, just k"),)
    turns = [
        JudgedTurn(prompt, output, recorded, (), -1.0),
        JudgedTurn(prompt, output, recorded, top, -1.0, hinted),
    ]
    metrics = train_openclaw_rl(None, turns, tmp_path / "out", OpenClawTraining(epochs=1))
    assert metrics["ratio_first"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["distilled_turns"] == 1.0 and metrics["distill_first"] > 0.0
    assert metrics["reward_mean"] == -1.0 and metrics["steps"] == 1.0
    assert (tmp_path / "out" / "config.json").is_file()
    new = sum(answer_logprobs(tiny_answer(tmp_path / "out")[2], output))
    assert new < sum(recorded)  # a -1 reward made the judged answer less likely


def test_a_batch_mean_baseline_is_subtracted_from_every_turns_reward() -> None:
    """Rewards +1, -1, -1, -1: the batch-mean baseline is -0.5, the advantages 1.5 and
    -0.5 (each minibatch subtracts the whole batch's mean); without one, the raw reward."""
    turns = [JudgedTurn((1, 2), (3,), (-0.5,), (), score) for score in (1.0, -1.0, -1.0, -1.0)]
    assert reward_baseline(turns, OpenClawTraining()) == 0.0
    baseline = reward_baseline(turns, OpenClawTraining(baseline="batch_mean"))
    assert baseline == -0.5
    tensors = turn_tensors(turns[:2], [None, None], 0, baseline)
    assert tensors.rewards.tolist() == [1.5, -0.5]


def test_turns_all_judged_alike_leave_the_policy_unchanged_under_a_batch_mean_baseline(
    tmp_path: Path,
) -> None:
    """Every turn -1: every advantage is 0, so the PPO term has no gradient (no
    distillation either): the judged answer is as likely after as before (AdamW's weight
    decay alone moves the weights, by a few millionths)."""
    prompt, output, full = tiny_answer()
    recorded = answer_logprobs(full, output)
    turns = [JudgedTurn(prompt, output, recorded, (), -1.0)] * 2
    options = OpenClawTraining(epochs=1, baseline="batch_mean", distill_coef=0)
    metrics = train_openclaw_rl(None, turns, tmp_path / "out", options)
    assert metrics["baseline"] == -1.0
    new = sum(answer_logprobs(tiny_answer(tmp_path / "out")[2], output))
    assert new == pytest.approx(sum(recorded), abs=1e-3)
