"""A Faust table seen through the processors' key-value state interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ChangelogRecord:
    """One state write as the table's changelog record (bytes as Faust itself writes them)."""

    topic: str
    partition: int
    key: bytes
    value: bytes | None


class TableState:
    """:class:`reef.processors.state.KeyValueState` over a Faust ``Table``.

    Reads and writes go to the table's store (the event's partition) directly; each write's
    changelog record is kept here instead of going through Faust's producer buffer, and the
    agent sends them (:meth:`take_changelog`) on the input partition's transactional
    producer together with the step's outputs, in one transaction. Faust's buffer is
    drained by a background task that takes the transaction lock on its own, so a commit
    could land between an event's outputs and its state writes (the outputs committed, the
    state not: the redelivered event was joined again).
    """

    def __init__(self, table: Any) -> None:
        self._table = table
        self._pending: list[ChangelogRecord] = []

    def get(self, key: str) -> Any:
        return self._table.get(key)

    def set(self, key: str, value: Any) -> None:
        self._table.data[key] = value
        self._record(key, value, deleted=False)

    def delete(self, key: str) -> None:
        if key in self._table.data:
            del self._table.data[key]
            self._record(key, None, deleted=True)

    def take_changelog(self) -> list[ChangelogRecord]:
        """The changelog records of the writes since the last call, in write order."""
        taken, self._pending = self._pending, []
        return taken

    def _record(self, key: str, value: Any, *, deleted: bool) -> None:
        table = self._table
        # exactly what Table.send_changelog would send (a delete: a raw None tombstone)
        message = table.changelog_topic.as_future_message(
            key=key,
            value=value,
            partition=table.partition_for_key(key),
            key_serializer=table.key_serializer,
            value_serializer="raw" if deleted else table.value_serializer,
        ).message
        self._pending.append(
            ChangelogRecord(
                topic=table.changelog_topic.get_topic_name(),
                partition=message.partition,
                key=message.key,
                value=message.value,
            )
        )
