"""The tensor math of ``openclaw_rl``: the clipped PPO term and the top-K distillation.

Rows are judged turns, positions are *generated* tokens only (entry ``t`` is about output
token ``t``); ``mask`` is 1 on real positions and 0 on padding. Both terms are means
over the real positions of the batch.
"""

from __future__ import annotations

import torch


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    log_ratio_clamp: float = 20.0,
) -> tuple[torch.Tensor, float, float]:
    """(loss, mean ratio, clipped fraction) of PPO's clipped surrogate.

    Per token ``r = exp(clamp(log pi - log pi_old))`` against the recorded
    generation-time logprobs, advantage ``A`` = the row's entry of ``rewards`` (its
    reward, less the recipe's baseline), and the loss is
    ``-min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A)``: past the clip in the
    direction the reward pushes, a token gives no gradient.
    """
    real = mask.bool()
    log_ratio = torch.clamp(logprobs - old_logprobs, -log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(log_ratio * real)
    advantages = rewards[:, None].expand_as(ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    surrogate = torch.minimum(unclipped, clipped)
    tokens = real.sum().clamp(min=1)
    loss = -(surrogate * real).sum() / tokens
    with torch.no_grad():
        mean_ratio = float((ratio * real).sum() / tokens)
        was_clipped = (clipped < unclipped) & real
        fraction = float(was_clipped.sum() / tokens)
    return loss, mean_ratio, fraction


def restricted_log_softmax(
    logprobs: torch.Tensor, top_ids: torch.Tensor, top_mask: torch.Tensor
) -> torch.Tensor:
    """Full-vocabulary log-probs ``[..., V]`` restricted to ``top_ids`` ``[..., K]`` and
    renormalised over them (padding ids, ``top_mask`` 0, get ``-inf``)."""
    gathered = logprobs.gather(-1, top_ids)
    gathered = gathered.masked_fill(~top_mask.bool(), float("-inf"))
    normaliser = torch.logsumexp(gathered, dim=-1, keepdim=True)
    return (gathered - normaliser).masked_fill(~top_mask.bool(), 0.0)


def topk_distill_loss(
    student: torch.Tensor,
    teacher: torch.Tensor,
    top_mask: torch.Tensor,
    position_mask: torch.Tensor,
) -> torch.Tensor:
    """Mean over distilled positions of ``KL(teacher_K || student_K)``.

    ``student`` and ``teacher`` are log-probs restricted and renormalised over the same
    top-K ids (:func:`restricted_log_softmax`), ``[rows, positions, K]``; the teacher is
    constant (no gradient). Zero, with zero gradient, where the two agree on the K ids.
    """
    keep = top_mask.bool() & position_mask.bool()[..., None]
    p_teacher = teacher.detach().exp() * keep
    per_id = p_teacher * (teacher.detach() - student)
    positions = position_mask.sum().clamp(min=1)
    return (per_id * keep).sum() / positions
