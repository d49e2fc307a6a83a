"""Errors of recipes and trainers, under Reef's one tree (:mod:`reef.core.errors`).

ReefError
├── ConfigError
│   └── RecipeConfigError     a recipe's configuration is invalid (names the key)
│       └── DeviceUnavailableError  ``training.device`` names a device this machine lacks
└── RecipeError               a recipe failed at run time
    ├── TrainingError         a backend could not produce a candidate
    │   ├── EditError         a proposed harness edit cannot apply (recipes.harness_edits)
    │   └── CandidateRejectedError  refused before the gate (``gepa``: no minibatch gain;
    │                               ``composite``: no part passed its own gate)
    ├── RolloutError          a sample is not one scored rollout ``sao`` can train (reason)
    │   └── MissingLogprobsError   no engine-recorded token ids and generation-time logprobs
    ├── EvaluationError       an evaluator failed (the gate then fails closed)
    ├── MissingGroupKeyError  a report lacks the grouping key the recipe needs (recipes.base)
    └── HarnessError          a harness folder cannot be read as text (recipes.harness_edits)
"""

from __future__ import annotations

from reef.core.errors import ConfigError, ReefError


class RecipeConfigError(ConfigError):
    """A recipe's configuration is invalid; the message names the offending key."""


class DeviceUnavailableError(RecipeConfigError):
    """``training.device`` names a device this machine does not have (found at start)."""


class RecipeError(ReefError):
    """A recipe failed while running."""


class TrainingError(RecipeError):
    """A training backend could not produce a candidate."""


class CandidateRejectedError(TrainingError):
    """A candidate was judged and refused before the gate (``gepa``: no minibatch gain;
    ``composite``: no part passed its own gate)."""


class EvaluationError(RecipeError):
    """An evaluator could not score a candidate or release."""


class RolloutError(RecipeError):
    """A sample is not one scored rollout the recipe can train; ``reason`` names why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class MissingLogprobsError(RolloutError):
    """A rollout lacks the engine's token ids and generation-time logprobs (no re-tokenising)."""

    def __init__(self, message: str) -> None:
        super().__init__("no_engine_logprobs", message)
