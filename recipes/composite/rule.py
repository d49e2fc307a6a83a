"""The per-part gating rule of ``composite``, as pure functions over evaluations.

Each part of a candidate is judged on its own, against the same part of the served
release (the head), by the gate of the part's own recipe:

* a part whose content equals the served part's is **unchanged**: the served part is kept;
* a changed part is **taken** if its recipe's gate selects it, else **refused**.

A candidate is released when at least one part is taken and no changed part is refused.
The recipe composes its candidate from the taken parts and the served ones (a refused
part is replaced by the served part before anything is proposed), so a release never
carries a refused part, and a candidate with no part taken proposes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from recipes.errors import EvaluationError
from recipes.gates import Decision, Evaluation

#: a part recipe's gate: (candidate's part, served part) -> decision
Gate = Callable[[Evaluation, Evaluation], Decision]
POLICY = "composite"


@dataclass(frozen=True, slots=True)
class PartScore:
    """One part's evaluation and the content id of the part it scored."""

    content_id: str
    evaluation: Evaluation


@dataclass(frozen=True, slots=True)
class PartVerdict:
    """What the rule made of one part."""

    part: str
    changed: bool
    taken: bool
    reason: str

    def describe(self) -> str:
        if self.taken:
            return f"{self.part}: taken ({self.reason})"
        if self.changed:
            return f"{self.part}: refused, the served part is kept ({self.reason})"
        return f"{self.part}: the served part is kept ({self.reason})"


def judge(
    candidate: Mapping[str, PartScore], served: Mapping[str, PartScore], gates: Mapping[str, Gate]
) -> list[PartVerdict]:
    """Each part (in ``gates``' order) against the served one, by its own gate."""
    verdicts = []
    for part, gate in gates.items():
        mine, theirs = candidate[part], served[part]
        if mine.content_id == theirs.content_id:
            verdicts.append(PartVerdict(part, False, False, "unchanged"))
            continue
        decision = gate(mine.evaluation, theirs.evaluation)
        verdicts.append(PartVerdict(part, True, decision.selected, decision.reason))
    return verdicts


def release_decision(verdicts: list[PartVerdict]) -> Decision:
    """Selected when some part is taken and no changed part is refused."""
    taken = any(v.taken for v in verdicts)
    refused = any(v.changed and not v.taken for v in verdicts)
    reason = "; ".join(v.describe() for v in verdicts)
    return Decision(taken and not refused, POLICY, reason)


def combine(parts: Mapping[str, PartScore]) -> Evaluation:
    """One evaluation of a composite folder; its score (the parts' mean) is for display
    only: the decision is per part (:func:`judge`), from ``details``."""
    metrics: dict[str, float] = {}
    details: list[dict[str, Any]] = []
    for part, scored in parts.items():
        evaluation = scored.evaluation
        metrics[f"{part}/score"] = evaluation.score
        metrics.update({f"{part}/{key}": value for key, value in evaluation.metrics.items()})
        details.append(
            {
                "part": part,
                "content_id": scored.content_id,
                "evaluator": evaluation.evaluator,
                "score": evaluation.score,
                "metrics": dict(evaluation.metrics),
            }
        )
    mean = sum(p.evaluation.score for p in parts.values()) / max(len(parts), 1)
    evaluator = ",".join(f"{part}={p.evaluation.evaluator}" for part, p in parts.items())
    return Evaluation(f"{POLICY}:{evaluator}", mean, metrics, details)


def split(evaluation: Evaluation) -> dict[str, PartScore]:
    """The parts of an evaluation :func:`combine` made (EvaluationError for any other)."""
    parts = {}
    for entry in evaluation.details:
        try:
            scored = Evaluation(entry["evaluator"], entry["score"], dict(entry["metrics"]))
            parts[str(entry["part"])] = PartScore(str(entry["content_id"]), scored)
        except (KeyError, TypeError) as exc:
            raise EvaluationError(f"not a composite evaluation: {evaluation.evaluator}") from exc
    return parts
