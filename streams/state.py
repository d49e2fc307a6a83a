"""A Faust table seen through the processors' key-value state interface."""

from __future__ import annotations

from typing import Any


class TableState:
    """:class:`reef.processors.state.KeyValueState` over a Faust ``Table``.

    Writes go to the table's changelog partition of the event being processed, through
    the same transactional producer as the outputs (``exactly_once``).
    """

    def __init__(self, table: Any) -> None:
        self._table = table

    def get(self, key: str) -> Any:
        return self._table.get(key)

    def set(self, key: str, value: Any) -> None:
        self._table[key] = value

    def delete(self, key: str) -> None:
        if key in self._table:
            del self._table[key]
