"""The tensor math of ``sao``: skip-observation GAE, the DIS mask and loss, the value loss.

Positions are *target* positions: entry ``t`` of a row is about the token at ``t + 1``
of the sequence (what the logits at ``t`` predict), so a row's action mask, recorded
logprobs, rewards and values are all shifted by one against the token ids. Only
generated (action) tokens carry advantages and losses; every function takes the mask.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def skip_observation_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    gamma: float,
    lams: Sequence[float],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), each ``[rows, positions]``, zero off the action tokens.

    Per row, backwards over action tokens only: ``delta_t = r_t + gamma * V_next - V_t``
    and ``A_t = delta_t + gamma * lam * A_next``, where *next* is the next **action**
    token (observation tokens in between are skipped, not stepped through: they are the
    environment's, not the policy's) and both are 0 after the last one. Returns are
    ``A + V`` (the critic's targets).
    """
    advantages = torch.zeros_like(values)
    mask = action_mask.bool().tolist()
    for row, lam in enumerate(lams):
        next_value, next_advantage = 0.0, 0.0
        for t in reversed(range(values.shape[1])):
            if not mask[row][t]:
                continue
            value = float(values[row, t])
            delta = float(rewards[row, t]) + gamma * next_value - value
            next_advantage = delta + gamma * lam * next_advantage
            next_value = value
            advantages[row, t] = next_advantage
    returns = (advantages + values) * action_mask
    return advantages, returns


def dis_mask(ratio: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """True where the importance ratio lies strictly inside ``(1 - eps_low, 1 + eps_high)``."""
    return (ratio > 1.0 - eps_low) & (ratio < 1.0 + eps_high)


def dis_loss(
    logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
) -> tuple[torch.Tensor, float, float]:
    """(loss, mean ratio, masked fraction) of ``-sg(f(r)) * A * log pi`` over action tokens.

    ``r = exp(log pi - log pi_rollout)`` against the generation-time logprobs; ``f(r) = r``
    inside the DIS interval and 0 outside (a hard mask: those tokens give no gradient).
    The gradient inside equals the importance-weighted policy gradient ``-A * grad r``.
    """
    actions = action_mask.bool()
    with torch.no_grad():
        ratio = torch.exp((logprobs - rollout_logprobs) * actions)
        kept = dis_mask(ratio, eps_low, eps_high) & actions
        weight = ratio * kept
    tokens = actions.sum().clamp(min=1)
    loss = -(weight * advantages * logprobs * actions).sum() / tokens
    mean_ratio = float((ratio * actions).sum() / tokens)
    masked = float((actions & ~kept).sum() / tokens)
    return loss, mean_ratio, masked


def value_loss(
    values: torch.Tensor, returns: torch.Tensor, action_mask: torch.Tensor
) -> torch.Tensor:
    """Half the mean squared error of the critic on action tokens."""
    tokens = action_mask.sum().clamp(min=1)
    return 0.5 * (((values - returns) ** 2) * action_mask).sum() / tokens


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var(returns - values) / Var(returns)`` over action tokens (0 when flat)."""
    keep = mask.bool()
    target, predicted = returns[keep], values[keep]
    if target.numel() < 2 or float(target.var()) == 0.0:
        return 0.0
    return float(1.0 - (target - predicted).var() / target.var())
