"""Errors of recipes and trainers, under Reef's one tree (:mod:`reef.core.errors`).

ReefError
├── ConfigError
│   └── RecipeConfigError     a recipe's configuration is invalid (names the key)
└── RecipeError               a recipe failed at run time
    ├── TrainingError         a backend could not produce a candidate
    │   └── EditError         a proposed harness edit cannot apply (recipes.harness_edits)
    ├── EvaluationError       an evaluator failed (the gate then fails closed)
    ├── MissingGroupKeyError  a report lacks the grouping key the recipe needs (recipes.base)
    └── HarnessError          a harness folder cannot be read as text (recipes.harness_edits)
"""

from __future__ import annotations

from reef.core.errors import ConfigError, ReefError


class RecipeConfigError(ConfigError):
    """A recipe's configuration is invalid; the message names the offending key."""


class RecipeError(ReefError):
    """A recipe failed while running."""


class TrainingError(RecipeError):
    """A training backend could not produce a candidate."""


class EvaluationError(RecipeError):
    """An evaluator could not score a candidate or release."""
