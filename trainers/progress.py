"""A trainer's progress counters, shown by ``status()`` (and GET /reef/status)."""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

HISTORY = 50
#: how a training step ended: the candidate failed to train, an evaluation failed, the
#: gate or the chain rejected it, or it was committed (a kept pending release has none)
Outcome = Literal[
    "training_failed", "evaluation_failed", "gate_rejected", "chain_rejected", "committed"
]


@dataclass(slots=True)
class TrainingStep:
    """One attempt at a candidate from a batch, filled in as the attempt goes (train,
    gate, propose, the chain's decision); ``status()`` shows the set fields."""

    scenario: str
    #: the head release it trained from
    parent_release_id: str
    samples: int
    #: when the attempt started (Unix seconds)
    at: float
    #: the recipe's training metrics
    training: dict[str, float] | None = None
    candidate_score: float | None = None
    baseline_score: float | None = None
    outcome: Outcome | None = None
    reason: str | None = None
    proposal_id: str | None = None
    #: a gate-rejected candidate the recipe keeps, recorded as a pending release
    pending_release_id: str | None = None
    #: the release the chain committed
    release_id: str | None = None
    #: the rollout the chain started with the release (the recipe's rollout mode)
    rollout: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(slots=True)
class Progress:
    recipe: str
    group: str
    started_at: float = field(default_factory=time.time)
    running: bool = False
    error: str | None = None
    samples_read: int = 0
    batches: int = 0
    candidates: Counter[str] = field(default_factory=Counter)
    proposals: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    #: pushes of committed heads to engines (trainers.publish): ok / failed / skipped
    publishes: Counter[str] = field(default_factory=Counter)
    steps: deque[TrainingStep] = field(default_factory=lambda: deque(maxlen=HISTORY))
    rejections: deque[dict[str, str]] = field(default_factory=lambda: deque(maxlen=HISTORY))

    def skip(self, sample_id: str, scenario: str, reason: str, detail: str = "") -> None:
        self.skipped[reason] += 1
        self.rejections.append(
            {"sample_id": sample_id, "scenario": scenario, "reason": reason, "detail": detail}
        )

    def as_json(self, pending: int) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "group": self.group,
            "running": self.running,
            "error": self.error,
            "samples_read": self.samples_read,
            "samples_pending": pending,
            "batches": self.batches,
            "candidates": {
                "accepted": self.candidates["accepted"],
                "rejected": self.candidates["rejected"],
                "failed": self.candidates["failed"],
            },
            "proposals": dict(self.proposals),
            "publishes": {k: self.publishes[k] for k in ("ok", "failed", "skipped")},
            "samples_skipped": dict(self.skipped),
            "samples_skipped_stale": self.skipped["stale"],
            "steps": [step.as_json() for step in self.steps],
            "recent_rejections": list(self.rejections)[-10:],
        }
