"""Which release an engine should serve: a pure fold over ``reef.releases``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from reef.core.events import Event, ReleaseCommitted, ScenarioCreated


@dataclass(frozen=True, slots=True)
class Wanted:
    """The head release of a scenario, as the engine should serve it."""

    release_id: str
    content_id: str
    committed_at: datetime


class HeadTracker:
    """Folds committed releases into each followed scenario's serving head."""

    def __init__(self, scenarios: frozenset[str]) -> None:
        self.scenarios = scenarios
        self.heads: dict[str, Wanted] = {}

    def apply(self, event: Event) -> Wanted | None:
        """The scenario's new head if this event moved it, else None."""
        if event.scenario not in self.scenarios:
            return None
        if isinstance(event, ScenarioCreated) and event.scenario not in self.heads:
            # the creation release exists before the chain commits it: its content is
            # the seed (or nothing), so there is nothing to load yet
            return None
        if not isinstance(event, ReleaseCommitted) or event.pending:
            return None
        current = self.heads.get(event.scenario)
        if current is not None and current.release_id == event.release_id:
            return None
        wanted = Wanted(event.release_id, event.content_id, event.occurred_at)
        self.heads[event.scenario] = wanted
        return wanted
