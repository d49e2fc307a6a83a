"""What a recipe may learn from the release chain: committed releases, as facts.

A recipe whose state is more than the head release (``gepa``'s archive of candidates)
keeps it as a fold over the scenario's committed releases, never in a side file: the
trainer hands it every :class:`ReleaseFact` it reads from ``reef.releases``, in log
order, again from the start after a restart (so :meth:`ReleaseObserver.observe_release`
must ignore a release it has seen), and a way to open any release's files by content id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from recipes.gates import Evaluation

#: content id → the release's files as a read-only folder (None for the empty release)
ContentOpener = Callable[[str], Path | None]


@dataclass(frozen=True, slots=True)
class ReleaseFact:
    """One committed release of a scenario (``pending``: recorded, not served)."""

    scenario: str
    release_id: str
    content_id: str
    operation: str
    parent_release_id: str | None = None
    pending: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class ReleaseObserver(Protocol):
    """A recipe that folds the release chain (the trainer feeds it)."""

    def observe_release(self, fact: ReleaseFact) -> None:
        """Fold one committed release; a release seen before changes nothing."""
        ...

    def bind_contents(self, opener: ContentOpener) -> None:
        """Set how release files are opened (the trainer does this once)."""
        ...

    def keep_rejected(self, candidate: Evaluation) -> bool:
        """Whether a candidate the gate rejected is recorded as a pending release."""
        ...
