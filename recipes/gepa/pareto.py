"""Per-task Pareto fronts over an archive and the seeded, stateless parent draw.

Candidates are named by id and scored per validation task. For each task the *front* is
the set of candidates holding the best score on it (an equal score joins, a better one
replaces). A candidate whose fronts are a strict subset of another candidate's fronts is
dominated and never drawn; the rest are drawn with weight = the number of fronts they
sit on. The draw is a function of (seed, key, scores) only: no generator state to keep,
so a step redone after a crash (same key: the same batch) draws the same parent.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

Scores = Mapping[str, Mapping[str, float]]


def fronts(scores: Scores) -> dict[str, frozenset[str]]:
    """Task → the candidates holding that task's best score."""
    best: dict[str, float] = {}
    for per_task in scores.values():
        for task, score in per_task.items():
            best[task] = max(score, best.get(task, score))
    return {
        task: frozenset(c for c, per_task in scores.items() if per_task.get(task) == top)
        for task, top in best.items()
    }


def weights(scores: Scores) -> dict[str, int]:
    """Candidate → number of fronts it sits on, for the candidates that are not dominated."""
    membership: dict[str, frozenset[str]] = {
        c: frozenset(t for t, members in fronts(scores).items() if c in members) for c in scores
    }
    return {
        c: len(tasks)
        for c, tasks in membership.items()
        if tasks and not any(tasks < other for other in membership.values())
    }


def draw_parent(scores: Scores, *, seed: int, key: str) -> str | None:
    """The parent for the step named ``key`` (None when no candidate is scored)."""
    chances = weights(scores)
    if not chances:
        return None
    ordered = sorted(chances)
    # a str seed is hashed with sha512: the same draw in every process
    rng = random.Random(f"gepa:{seed}:{key}")  # noqa: S311 - a search draw, not a secret
    return rng.choices(ordered, weights=[chances[c] for c in ordered])[0]
