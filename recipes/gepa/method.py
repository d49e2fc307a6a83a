"""The pure decisions of one ``gepa`` step besides the parent draw.

1. The component rewritten is chosen round-robin over the parent's sorted component
   paths; the child inherits the cursor, one further on.
2. A minibatch on which the parent already scores perfectly is skipped (nothing to learn).
3. The child is kept only if its summed minibatch score is strictly greater than the
   parent's: a tie is a rejection.
4. A kept child is published only if its mean on the validation tasks is strictly
   greater than the served tree's on the same tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from recipes.gates import Decision, Evaluation

POLICY = "gepa_strict_mean"


@dataclass(frozen=True, slots=True)
class Verdict:
    accepted: bool
    reason: str


def next_component(paths: Sequence[str], cursor: int) -> tuple[str, int]:
    """(the component to rewrite, the child's cursor); ``paths`` must not be empty."""
    ordered = sorted(paths)
    return ordered[cursor % len(ordered)], cursor + 1


def all_perfect(scores: Sequence[float], perfect: float) -> bool:
    return bool(scores) and all(score >= perfect for score in scores)


def accept_child(parent: Sequence[float], child: Sequence[float]) -> Verdict:
    """Step 3: strictly better on the same minibatch, summed."""
    before, after = sum(parent), sum(child)
    relation = ">" if after > before else "<=" if after < before else "== (a tie)"
    return Verdict(after > before, f"minibatch {after:.4f} {relation} parent {before:.4f}")


def publish(candidate: Evaluation, served: Evaluation | None) -> Decision:
    """Step 4: strictly better mean than the served tree on the validation tasks."""
    if served is None:
        return Decision(False, POLICY, "no evaluation of the served tree")
    ok = candidate.score > served.score
    return Decision(
        ok,
        POLICY,
        f"validation {candidate.score:.4f} vs served {served.score:.4f} "
        f"({'strictly better' if ok else 'not strictly better'})",
    )
