"""The records a Kafka task fetched and has not folded yet.

Per input partition, in offset order. :meth:`PartitionBuffer.take` hands out what the
kernel's horizon lets through (:mod:`reef.core.kernel`): an input that may still have
unfetched records (the caller knows which: the consumer's positions) bounds the batch by
its last held record. :meth:`PartitionBuffer.full` names the inputs holding too much;
:class:`InputPauses` pauses them on the consumer while the others catch up. No broker is
needed to use or test either.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator
from itertools import takewhile
from typing import Generic, Protocol, TypeVar

from reef.core.kernel import OrderKey, horizon, ready
from streams.records import TopicPartition


class Fetched(Protocol):
    """A fetched record: the buffer reads its offset (its order comes from the caller)."""

    @property
    def offset(self) -> int: ...


K = TypeVar("K", bound=Hashable)
F = TypeVar("F", bound=Fetched)


class PartitionBuffer(Generic[K, F]):
    """One task's fetched records, per input (keyed as the consumer names partitions)."""

    __slots__ = ("_held", "_input_of", "_order")

    def __init__(
        self, inputs: Iterable[K], input_of: Callable[[F], K], order: Callable[[F], OrderKey]
    ) -> None:
        self._held: dict[K, deque[F]] = {tp: deque() for tp in inputs}
        self._input_of = input_of
        self._order = order

    def __iter__(self) -> Iterator[K]:
        return iter(self._held)

    def hold(self, tp: K, records: Iterable[F]) -> None:
        """Keep records fetched from ``tp`` (an input of this task), in offset order."""
        self._held[tp].extend(records)

    def holds(self, tp: K) -> bool:
        return bool(self._held[tp])

    def resume_offset(self, tp: K, committed: int) -> int:
        """Where to fetch ``tp`` from again: after its last held record, else ``committed``."""
        held = self._held[tp]
        return held[-1].offset + 1 if held else committed

    def take(self, open_inputs: Collection[K], most: int) -> list[F]:
        """Up to ``most`` records that may be folded now, in the kernel's order; they
        leave the buffer. ``open_inputs``: the inputs that may still have unfetched
        records (one with nothing held holds everything back)."""
        bounds = [
            self._order(held[-1]) if held else None
            for tp, held in self._held.items()
            if tp in open_inputs
        ]
        limit = horizon(bounds)
        prefixes = []
        for held in self._held.values():
            count = len(held)
            if limit is not None:
                count = sum(1 for _ in takewhile(lambda r: self._order(r) <= limit, held))
            prefixes.append([held.popleft() for _ in range(count)])
        merged = ready(prefixes, self._order, None)
        for record in reversed(merged[most:]):  # the rest waits, in order
            self._held[self._input_of(record)].appendleft(record)
        return merged[:most]

    def full(self, most: int) -> set[K]:
        """The inputs holding ``most`` records or more."""
        return {tp for tp, held in self._held.items() if len(held) >= most}


class Pausing(Protocol):
    """The consumer calls back-pressure makes."""

    def pause(self, *tps: TopicPartition) -> None: ...
    def resume(self, *tps: TopicPartition) -> None: ...


class InputPauses:
    """The input partitions paused on the consumer because their buffers hold too much:
    fetching them waits while a co-partitioned input catches up, so a worker's memory
    stays bounded whatever the inputs' fetch sizes."""

    __slots__ = ("_consumer", "_paused")

    def __init__(self, consumer: Pausing) -> None:
        self._consumer = consumer
        self._paused: set[TopicPartition] = set()

    def __contains__(self, tp: object) -> bool:
        return tp in self._paused

    def hold_back(self, full: set[TopicPartition]) -> None:
        """Pause exactly ``full`` (:meth:`PartitionBuffer.full` of every task): the inputs
        newly full are paused, the paused ones no longer full resumed."""
        if full - self._paused:
            self._consumer.pause(*(full - self._paused))
        if self._paused - full:
            self._consumer.resume(*(self._paused - full))
        self._paused = set(full)

    def release(self) -> None:
        """Resume every paused input (their tasks are closing: nothing is held any more)."""
        if self._paused:
            self._consumer.resume(*self._paused)
        self._paused = set()
