"""Admitted samples waiting for a batch, per scenario (pure, no I/O).

Units are single samples, or with ``group_by`` complete groups of ``group_size``
samples sharing the group key's value; a batch is ``batch_size`` units, oldest first,
within the per-reporter cap and distinct-reporter minimum of the recipe's batching
(units over the cap keep waiting for a later batch).
A sample stays *pending* (it holds back its partition's committed offset) from
:meth:`Batcher.add` until the batch that took it is decided.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from recipes.base import Batch, Batching
from recipes.samples import Sample


@dataclass(slots=True)
class _Waiting:
    #: group value → samples (the key ``None`` holds ungrouped samples)
    groups: dict[str | None, list[Sample]] = field(default_factory=dict)

    def units(self, group_size: int, grouped: bool) -> list[tuple[Sample, ...]]:
        if not grouped:
            return [(s,) for s in self.groups.get(None, [])]
        complete = [g[:group_size] for g in self.groups.values() if len(g) >= group_size]
        complete.sort(key=lambda g: min(s.offset for s in g))
        return [tuple(g) for g in complete]


class Batcher:
    def __init__(self, config: Batching) -> None:
        self.config = config
        self._waiting: dict[str, _Waiting] = {}
        self._ids: set[str] = set()

    def __contains__(self, sample_id: str) -> bool:
        return sample_id in self._ids

    def add(self, sample: Sample, group: str | None) -> None:
        if sample.sample_id in self._ids:
            return
        waiting = self._waiting.setdefault(sample.scenario, _Waiting())
        waiting.groups.setdefault(group, []).append(sample)
        self._ids.add(sample.sample_id)

    def prune(
        self, scenario: str, reason_for: Callable[[Sample], str | None]
    ) -> list[tuple[Sample, str]]:
        """Drop waiting samples for which ``reason_for`` gives a reason; returns them."""
        waiting = self._waiting.get(scenario)
        dropped: list[tuple[Sample, str]] = []
        if waiting is None:
            return dropped
        for key, samples in list(waiting.groups.items()):
            kept = []
            for sample in samples:
                reason = reason_for(sample)
                if reason is None:
                    kept.append(sample)
                else:
                    dropped.append((sample, reason))
                    self._ids.discard(sample.sample_id)
            if kept:
                waiting.groups[key] = kept
            else:
                del waiting.groups[key]
        return dropped

    def scenarios(self) -> list[str]:
        return [name for name, waiting in self._waiting.items() if waiting.groups]

    def ready(self, scenario: str) -> bool:
        return self.config.choose(self._units(scenario)) is not None

    def take(self, scenario: str, *, partial: bool = False) -> Batch | None:
        """The next batch (oldest units first, within the reporter rules of
        :meth:`Batching.choose`), or None; ``partial`` takes a short one."""
        chosen = self.config.choose(self._units(scenario), partial=partial)
        if chosen is None:
            return None
        taken = {s.sample_id for unit in chosen for s in unit}
        waiting = self._waiting[scenario]
        for key, samples in list(waiting.groups.items()):
            rest = [s for s in samples if s.sample_id not in taken]
            if rest:
                waiting.groups[key] = rest
            else:
                del waiting.groups[key]
        # taken samples stay in ``_ids`` (pending) until :meth:`release` is called
        return Batch(scenario, tuple(chosen))

    def release(self, sample_ids: list[str]) -> None:
        """The batch holding these samples was decided: they are no longer pending."""
        self._ids.difference_update(sample_ids)

    def clear(self) -> None:
        """Forget every waiting and pending sample."""
        self._waiting.clear()
        self._ids.clear()

    def waiting_count(self, scenario: str | None = None) -> int:
        names = [scenario] if scenario is not None else list(self._waiting)
        return sum(
            len(samples)
            for name in names
            for samples in self._waiting.get(name, _Waiting()).groups.values()
        )

    def _units(self, scenario: str) -> list[tuple[Sample, ...]]:
        waiting = self._waiting.get(scenario)
        if waiting is None:
            return []
        units = waiting.units(self.config.group_size, self.config.group_by is not None)
        return sorted(units, key=lambda unit: min(s.offset for s in unit))
