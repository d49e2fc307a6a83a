"""What the ``openclaw_rl`` recipe needs from a training backend: options, turn, port.

A backend (:mod:`trainers.backends.openclaw_rl`) depends on this module alone, never on
the recipe's module: the recipe decides which turns train and with which hint, the
backend does the tensor work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field

from recipes.errors import RolloutError
from recipes.strict import StrictModel
from recipes.training import TrainingBackend


class OpenClawTraining(StrictModel):
    """``training:`` of ``openclaw_rl``: the optimiser, the PPO clip and the distillation."""

    base_model: str = Field(default="tiny", description="Creation weights (built-in or folder).")
    learning_rate: float = Field(default=5e-4, gt=0, description="Policy AdamW rate.")
    epochs: int = Field(default=2, ge=1, description="Passes over a batch per candidate.")
    minibatch: int = Field(default=16, ge=1, description="Judged turns per optimiser step.")
    clip_eps: float = Field(
        default=0.2, gt=0, lt=1, description="PPO clip: ratios outside 1 -/+ eps get no gradient."
    )
    clip_eps_high: float | None = Field(
        default=0.28, gt=0, description="Upper PPO clip (1 + this); null: clip_eps."
    )
    baseline: Literal["none", "batch_mean"] = Field(
        default="none",
        description="What the advantage subtracts from a turn's reward: none (the raw "
        "judgement) or batch_mean (the mean reward of the candidate's turns).",
    )
    log_ratio_clamp: float = Field(
        default=20.0, gt=0, description="|log ratio| is clamped to this before exp."
    )
    distill_coef: float = Field(
        default=1.0,
        ge=0,
        description="Weight of the top-K distillation toward the frozen base given the "
        "hint (0: PPO only, no top-K record needed).",
    )
    min_top_k: int = Field(
        default=2, ge=1, description="Fewest recorded top-K ids a distilled token needs."
    )
    threads: int = Field(default=1, ge=1, description="torch CPU threads while training.")
    seed: int = Field(default=0, description="Seed of the training RNG.")

    @property
    def upper_clip(self) -> float:
        return self.clip_eps if self.clip_eps_high is None else self.clip_eps_high


@dataclass(frozen=True, slots=True)
class JudgedTurn:
    """One judged turn token for token, as the engine recorded it.

    ``prompt_ids`` + ``output_ids`` is the served exchange; ``logprobs`` the
    generation-time log-probabilities of ``output_ids``; ``top_ids`` the policy's
    recorded top-K token ids at each output position (empty without a record). With a
    hint, ``teacher_messages`` is the prompt with the hint inserted (the backend
    templates it as the engine does) and the frozen base is the teacher.
    """

    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top_ids: tuple[tuple[int, ...], ...]
    score: float
    teacher_messages: tuple[tuple[str, str], ...] | None = None

    def __post_init__(self) -> None:
        if not self.prompt_ids or not self.output_ids or len(self.logprobs) != len(self.output_ids):
            raise RolloutError("not_one_turn", "a turn needs a prompt and aligned output logprobs")
        if self.top_ids and len(self.top_ids) != len(self.output_ids):
            raise RolloutError("no_top_logprobs", "top-K ids not aligned with the output")

    @property
    def distilled(self) -> bool:
        return self.teacher_messages is not None


@runtime_checkable
class OpenClawBackend(TrainingBackend, Protocol):
    """A :class:`~recipes.training.TrainingBackend` that also trains ``openclaw_rl``."""

    def train_openclaw_rl(
        self,
        parent: Path | None,
        turns: Sequence[JudgedTurn],
        out_dir: Path,
        options: OpenClawTraining,
    ) -> dict[str, float]:
        """Train the parent's policy on judged turns (PPO on the reward, plus top-K
        distillation toward the parent's frozen weights given the hint); save to ``out_dir``."""
        ...
