"""What the ``sao`` recipe needs from a training backend: its options, its rollout, its port.

A backend (:mod:`trainers.backends.sao`) depends on this module alone, never on the
recipe's module; the recipe decides which rollouts train together and with which GAE
lambda, the backend does the tensor work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import Field

from recipes.errors import RolloutError
from recipes.strict import StrictModel
from recipes.training import TrainingBackend

#: the folder of a release that holds the critic (a top-level ``*.safetensors`` would be
#: read as policy weights by the engine and by SGLang)
CRITIC_DIR = "sao-critic"


class SaoTraining(StrictModel):
    """``training:`` of ``sao``: the policy and critic optimisers, GAE and the DIS mask."""

    base_model: str = Field(default="tiny", description="Creation weights (built-in or folder).")
    learning_rate: float = Field(default=1e-3, gt=0, description="Policy (actor) AdamW rate.")
    critic_learning_rate: float = Field(default=1e-3, gt=0, description="Critic AdamW rate.")
    epochs: int = Field(default=4, ge=1, description="Passes over a batch per candidate.")
    critic_steps_per_actor: int = Field(
        default=2, ge=1, description="Critic updates before each policy update."
    )
    warmup_steps: int = Field(
        default=2,
        ge=0,
        description="Critic-only steps at the start of a release line (the policy is unchanged).",
    )
    eps_low: float = Field(
        default=0.3, gt=0, lt=1, description="DIS mask: ratios at or below 1 - eps_low get no loss."
    )
    eps_high: float = Field(
        default=5.0, gt=0, description="DIS mask: ratios at or above 1 + eps_high get no loss."
    )
    gamma: float = Field(default=1.0, gt=0, le=1, description="Discount per generated token.")
    lam: float | None = Field(
        default=None, ge=0, le=1, description="Policy GAE lambda; null: length-adaptive."
    )
    lambda_alpha: float = Field(
        default=1.5, gt=0, description="Length-adaptive lambda: 1 - 1/(alpha * tokens)."
    )
    critic_lambda: float = Field(
        default=1.0, ge=0, le=1, description="GAE lambda of the critic's targets (1: Monte Carlo)."
    )
    threads: int = Field(default=1, ge=1, description="torch CPU threads while training.")
    seed: int = Field(default=0, description="Seed of the training RNG.")

    def policy_lambda(self, generated: int) -> float:
        """The policy's GAE lambda for a rollout of ``generated`` action tokens."""
        if self.lam is not None:
            return self.lam
        return adaptive_lambda(generated, self.lambda_alpha)


def adaptive_lambda(generated: int, alpha: float) -> float:
    """``1 - 1/(alpha * L)`` clamped to [0, 1]: the terminal reward's credit reaches the
    first generated token with weight ``lambda**L``, which tends to ``exp(-1/alpha)``
    (0.51 at alpha 1.5) whatever the length, so short and long answers assign credit
    alike (a fixed lambda would starve the start of long answers and over-smooth short
    ones)."""
    if generated <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - 1.0 / (alpha * generated)))


@dataclass(frozen=True, slots=True)
class ScoredRollout:
    """One scored trajectory token for token, as the engine recorded it.

    ``action_mask`` is 1 on tokens the policy generated and 0 on the prompt and on
    observations (tool results, user turns) between generated spans; ``logprobs`` are the
    generation-time log-probabilities of the generated tokens (0.0 elsewhere). The score
    is the reward of the last generated token.
    """

    token_ids: tuple[int, ...]
    action_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    score: float
    #: identifies the rollout's prompt (its tokens before the first generated one)
    prompt_key: str
    #: the policy's GAE lambda for this rollout
    lam: float

    def __post_init__(self) -> None:
        sizes = {len(self.token_ids), len(self.action_mask), len(self.logprobs)}
        if (
            len(sizes) != 1
            or not self.action_mask
            or self.action_mask[0]
            or not any(self.action_mask)
        ):
            raise RolloutError(
                "not_one_rollout",
                "a rollout needs aligned tokens, mask and logprobs, a prompt and a generated token",
            )

    @property
    def generated(self) -> int:
        return sum(self.action_mask)


#: one optimiser step's rollouts: at most one per prompt
Step = Sequence[ScoredRollout]


@runtime_checkable
class SaoBackend(TrainingBackend, Protocol):
    """A :class:`~recipes.training.TrainingBackend` that also trains ``sao`` candidates."""

    def train_sao(
        self, parent: Path | None, steps: Sequence[Step], out_dir: Path, options: SaoTraining
    ) -> dict[str, float]:
        """Train the parent's policy and critic (``parent/sao-critic``, else a fresh one)
        one optimiser step per entry of ``steps`` (per epoch); write both to ``out_dir``."""
        ...
