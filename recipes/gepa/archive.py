"""The archive of candidates: a fold over a scenario's committed releases.

A candidate is a distinct harness content (a content id). Folding a release:

* its content becomes a candidate if the archive does not know it (the seed at creation,
  an operator's edit, a child); a rollback to known content adds nothing;
* the gate's candidate evaluation (``evaluation.candidate.metrics``) gives the content's
  per-task validation scores, the baseline evaluation those of the parent release's
  content (the served tree, scored by the same gate);
* ``metrics["gepa.next_component"]`` is the content's component cursor.

A release seen before is ignored, so feeding the whole chain again after a restart
rebuilds the same archive. Pending releases (children the gate did not publish) are
candidates like the others: they may be drawn as parents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from recipes.releases import ReleaseFact

#: prefix of the per-task validation scores in an evaluation's metrics
TASK_PREFIX = "val/"
CURSOR = "gepa.next_component"


@dataclass(slots=True)
class Entry:
    content_id: str
    scores: dict[str, float] = field(default_factory=dict)
    cursor: int = 0


class Archive:
    """One scenario's candidates, in the order their content was first committed."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self._contents: dict[str, str] = {}  # release id → content id

    def observe(self, fact: ReleaseFact) -> None:
        if fact.release_id in self._contents:
            return
        self._contents[fact.release_id] = fact.content_id
        entry = self.ensure(fact.content_id)
        scored = task_scores(fact.evaluation.get("candidate"))
        if scored:
            entry.scores = scored
        parent = self._contents.get(fact.parent_release_id or "")
        baseline = task_scores(fact.evaluation.get("baseline"))
        if parent is not None and baseline and not self.entries[parent].scores:
            self.entries[parent].scores = baseline
        cursor = fact.metrics.get(CURSOR)
        if isinstance(cursor, int | float):
            entry.cursor = int(cursor)

    def ensure(self, content_id: str) -> Entry:
        """The content's entry, added unscored if unknown (e.g. the served tree)."""
        return self.entries.setdefault(content_id, Entry(content_id))

    def scores(self) -> dict[str, dict[str, float]]:
        """Per-task scores of the scored candidates (what the parent draw sees)."""
        return {c: dict(e.scores) for c, e in self.entries.items() if e.scores}


def task_scores(evaluation: Any) -> dict[str, float]:
    """The per-task scores an evaluation JSON carries (``val/<task>`` metrics)."""
    if not isinstance(evaluation, dict) or not isinstance(evaluation.get("metrics"), dict):
        return {}
    return {
        key: float(value)
        for key, value in evaluation["metrics"].items()
        if key.startswith(TASK_PREFIX) and isinstance(value, int | float)
    }
