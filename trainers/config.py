"""What a trainer is: its recipe's group, its name among the group's members, where it
works, which partitions of ``reef.samples`` it owns and how long a sample waits for its
release (one frozen object, passed to the trainer's collaborators)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: how long a sample served by a release the chain has not committed yet is held before it
#: is skipped as ``unknown_release``: a scenario's creation release is committed by the
#: chain processor after the API already serves it, so the join can get there first
RELEASE_WAIT_S = 60.0


@dataclass(frozen=True, slots=True)
class TrainerConfig:
    recipe_name: str
    producer: str
    work_dir: Path
    #: partitions of ``reef.samples`` this trainer owns (None: all of them)
    partitions: tuple[int, ...] | None = None
    #: seconds a sample of a release the chain does not know yet waits for it
    release_wait_s: float = RELEASE_WAIT_S

    @property
    def group(self) -> str:
        """The consumer group of ``reef.samples``, and the prefix of its proposals'
        producer names."""
        return f"trainer:{self.recipe_name}"
