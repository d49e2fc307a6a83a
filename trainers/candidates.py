"""The candidate pipeline of a trainer: train a candidate from a batch, evaluate it and
the head it trained from, let the recipe's gate decide (steps 3-4 of
:mod:`trainers.consumer`).

Given a recipe, nothing else: no log, no chain, no offsets. Each evaluation runs at most
once per candidate id or release content (the last :data:`EVALUATIONS_KEPT` are kept), so
a retried batch or a head judged against several candidates is evaluated once. Blocking
recipe calls run in a worker thread.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipes.base import Batch, Candidate, Evaluation, Parent, Recipe
from recipes.gates import Decision
from reef.core.errors import ReefError

#: evaluations remembered (by candidate id / release content id)
EVALUATIONS_KEPT = 256


class EvaluationFailedError(ReefError):
    """The candidate's or the head's evaluation raised: the candidate is rejected (the
    gate fails closed)."""


@dataclass(frozen=True, slots=True)
class Gated:
    """The gate's decision on a candidate, with both evaluations."""

    candidate: Evaluation
    baseline: Evaluation
    decision: Decision

    @property
    def selected(self) -> bool:
        return self.decision.selected

    def verdict(self) -> dict[str, Any]:
        """The proposal's ``evaluation_json``: both evaluations and the decision."""
        return {
            "candidate": self.candidate.as_json(),
            "baseline": self.baseline.as_json(),
            "decision": self.decision.as_json(),
        }


class CandidatePipeline:
    """Train, evaluate, gate, for one recipe."""

    def __init__(self, recipe: Recipe[Any]) -> None:
        self.recipe = recipe
        self._evaluations: dict[str, Evaluation] = {}

    async def train(self, batch: Batch, parent: Parent, out_dir: Path) -> Candidate:
        """The recipe's candidate from ``batch`` on ``parent``, in ``out_dir`` (any
        exception of the recipe propagates: the batch is dropped by the caller)."""
        return await asyncio.to_thread(self.recipe.produce, batch, parent, out_dir)

    async def gate(self, candidate_id: str, folder: Path, parent: Parent) -> Gated:
        """Evaluate the candidate and ``parent`` and decide; an evaluation that raises is
        an :class:`EvaluationFailedError`."""
        try:
            evaluation = await self._evaluate(candidate_id, folder)
            baseline = await self._evaluate(f"release:{parent.content_id}", parent.folder)
        except Exception as exc:  # any evaluator failure rejects the candidate
            raise EvaluationFailedError(f"{type(exc).__name__}: {exc}") from exc
        return Gated(evaluation, baseline, self.recipe.select(evaluation, baseline))

    async def _evaluate(self, key: str, folder: Path | None) -> Evaluation:
        if key not in self._evaluations:
            if len(self._evaluations) >= EVALUATIONS_KEPT:
                del self._evaluations[next(iter(self._evaluations))]  # the oldest
            self._evaluations[key] = await asyncio.to_thread(self.recipe.evaluate, folder)
        return self._evaluations[key]
