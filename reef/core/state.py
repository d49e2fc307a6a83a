"""The key-value state a processor step reads and writes, and the processor contract.

A step must be a deterministic function of (state, event): no clocks, no randomness, no
I/O. Output ids are derived from input ids, so a redelivered input yields the same
outputs and already-applied inputs are remembered in the state (a redelivery is a no-op).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

from reef.core.events import Event


class ReadableState(Protocol):
    """Reads of JSON-compatible values under string keys (None: absent)."""

    def get(self, key: str) -> Any: ...


class KeyValueState(ReadableState, Protocol):
    """JSON-compatible values under string keys."""

    def set(self, key: str, value: Any) -> None: ...

    def delete(self, key: str) -> None: ...


class Processor(Protocol):
    """One stream processor: its name, input topics and its pure step."""

    @property
    def name(self) -> str: ...

    @property
    def inputs(self) -> tuple[str, ...]: ...

    @property
    def output(self) -> str:
        """The main output topic; hosts write each output to its event type's topic."""
        ...

    def step(self, state: KeyValueState, event: Event) -> list[Event]: ...


@runtime_checkable
class ReadHinting(Protocol):
    """A processor that names the keys a step on an event will read, so a host whose
    reads are costly (a database) can fetch a whole batch's keys at once. Only a hint: a
    step still reads what it needs, so a wrong hint costs time, never a result."""

    def reads(self, event: Event) -> Iterable[str]: ...


class DictState:
    """In-memory :class:`KeyValueState` (replay, tests), optionally recording writes."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value

    def delete(self, key: str) -> None:
        self.data.pop(key, None)

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(sorted(self.data.items()))


class WriteBuffer:
    """A :class:`KeyValueState` view that buffers writes over a base state.

    Hosts use it to apply a step's writes together with its outputs, atomically; the
    base is only read (it may be a store that changes only once the writes committed).
    """

    _DELETED = object()

    def __init__(self, base: ReadableState) -> None:
        self.base = base
        self.writes: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        if key in self.writes:
            value = self.writes[key]
            return None if value is self._DELETED else value
        return self.base.get(key)

    def set(self, key: str, value: Any) -> None:
        self.writes[key] = value

    def delete(self, key: str) -> None:
        self.writes[key] = self._DELETED

    def changes(self) -> Iterator[tuple[str, Any | None]]:
        """(key, value) pairs; value None means deleted."""
        for key, value in self.writes.items():
            yield key, None if value is self._DELETED else value
