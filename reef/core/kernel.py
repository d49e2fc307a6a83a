"""The processing kernel every host and replay share: the order records are folded in,
the horizon that keeps a partly read input from being overtaken, and the fold.

Pure: no I/O, no clock, no log client. The embedded host (:mod:`reef.hosts.embedded`),
the Kafka host (:mod:`streams.host`) and replay (:mod:`reef.services.replay`) are
drivers around it, so a processor sees the same records in the same order whichever of
them runs it.

**Order.** The records of one partition number are folded by :func:`order_key`:
(append time, the topic's rank, offset). The rank is the topic's place in the log's
topic list (:data:`reef.core.topics.ALL_TOPICS`), one domain for every processor and
every host; offsets make keys unique, so records are never compared. Each input is
merged in offset order, never re-sorted: a record is never folded before an earlier
offset of its own partition, even where its append time went back (a clock step), and
every driver merges alike.

**Horizon.** A host reads its inputs in pieces. Where an input may still have unread
records, the first of them may sort before records already read from another input; so
a batch holds only the records up to the smallest last-read key among those inputs
(:func:`horizon`); an open input with nothing read bounds everything. Folding batch
after batch up to their horizons gives the order of folding everything at once
(where each input's keys rise with its offsets, as append times do).

**Fold.** :func:`fold`: each decodable event through the processor's step, in order;
the outputs in the order the steps made them. An undecodable record (``None``) is
skipped, as every reader skips it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from itertools import takewhile
from typing import Final, Protocol, TypeVar

from reef.core.events import Event
from reef.core.state import KeyValueState, Processor
from reef.core.topics import ALL_TOPICS

R = TypeVar("R")
#: where a record sorts among the records of its partition number
OrderKey = tuple[int, int, int]
#: the horizon of an open input from which nothing has been read: nothing is ready
BEFORE_ALL: Final[OrderKey] = (-1, -1, -1)


class TopicOrder:
    """The rank of each event topic (under a deployment's topic prefix): its place in
    the log's topic list."""

    __slots__ = ("_rank",)

    def __init__(self, prefix: str = "") -> None:
        self._rank = {prefix + topic: i for i, topic in enumerate(ALL_TOPICS)}

    def key(self, topic: str, timestamp_ms: int, offset: int) -> OrderKey:
        """:func:`order_key` of one record of ``topic``."""
        return (timestamp_ms, self._rank[topic], offset)


UNPREFIXED: Final = TopicOrder()


def order_key(topic: str, timestamp_ms: int, offset: int) -> OrderKey:
    """Where a record of an (unprefixed) event topic sorts within its partition number."""
    return UNPREFIXED.key(topic, timestamp_ms, offset)


class Placed(Protocol):
    """A record as a log reader returns it: where it is and when it was appended."""

    @property
    def topic(self) -> str: ...
    @property
    def timestamp_ms(self) -> int: ...
    @property
    def offset(self) -> int: ...


def record_key(record: Placed) -> OrderKey:
    """:func:`order_key` of a record read from the log."""
    return UNPREFIXED.key(record.topic, record.timestamp_ms, record.offset)


def horizon(open_inputs: Iterable[OrderKey | None]) -> OrderKey | None:
    """The last key a batch may fold, given each input that may still have unread
    records by the key of its last read record (None: nothing read from it). None when
    no input is open: everything read may be folded."""
    bounds = [BEFORE_ALL if last is None else last for last in open_inputs]
    return min(bounds) if bounds else None


def ready(
    inputs: Iterable[Iterable[R]], key: Callable[[R], OrderKey], limit: OrderKey | None
) -> list[R]:
    """The records of each input (each in offset order) up to ``limit`` (None: all),
    merged in key order."""
    if limit is None:
        prefixes = [list(records) for records in inputs]
    else:
        prefixes = [list(takewhile(lambda r: key(r) <= limit, records)) for records in inputs]
    return list(heapq.merge(*prefixes, key=key))


def fold(processor: Processor, state: KeyValueState, events: Iterable[Event | None]) -> list[Event]:
    """Each event through ``processor``'s step against ``state``, in order (``None``,
    an undecodable record, is skipped); the outputs in the order they were made."""
    outputs: list[Event] = []
    for event in events:
        if event is not None:
            outputs.extend(processor.step(state, event))
    return outputs
