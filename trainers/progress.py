"""A trainer's progress counters, shown by ``status()`` (and GET /reef/status)."""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

HISTORY = 50


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
    steps: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=HISTORY))
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
            "steps": list(self.steps),
            "recent_rejections": list(self.rejections)[-10:],
        }
