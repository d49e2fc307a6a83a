"""Every host's processor state passes the one state contract (reef/contracts/state.py).

- replay's :class:`DictState` (memory only);
- the embedded host's :class:`SqliteState` over ``processor_state`` rows, written with the
  host's own row writer and brought up to each commit like the host does;
- the Kafka host's :class:`PartitionStore` (RocksDB), whose restart is a restore from the
  changelog records its commits produced (the bytes the host sends to Kafka).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reef.contracts.state import DurableStateContract, StateContract
from reef.core.state import DictState, ReadableState
from reef.hosts.embedded import _create_state_table, store_state_rows
from reef.hosts.sqlite_state import SqliteState
from reef.hosts.state_codec import dump_value
from reef.log.embedded import connect
from streams.store import Change, PartitionStore


class DictHarness:
    def __init__(self) -> None:
        self.data = DictState()

    def state(self) -> ReadableState:
        return self.data

    def commit(self, changes: list[tuple[str, Any]]) -> None:
        for key, value in changes:
            if value is None:
                self.data.delete(key)
            else:
                self.data.set(key, value)

    def reopen(self) -> None:
        raise AssertionError("memory-only state has no restart")


class SqliteHarness:
    PROCESSOR = "join"

    def __init__(self, path: Path) -> None:
        self.path = path
        db = connect(path)
        _create_state_table(db)
        db.commit()
        db.close()
        self.current = SqliteState(path, self.PROCESSOR, cache_bytes=4096)

    def state(self) -> ReadableState:
        return self.current

    def commit(self, changes: list[tuple[str, Any]]) -> None:
        written = [(k, v, None if v is None else dump_value(v).decode()) for k, v in changes]
        db = connect(self.path)
        with db:
            store_state_rows(db, self.PROCESSOR, [(k, text) for k, _, text in written])
        db.close()
        self.current.committed((k, v, len(text or "")) for k, v, text in written)

    def reopen(self) -> None:
        self.current.close()
        self.current = SqliteState(self.path, self.PROCESSOR, cache_bytes=4096)

    def close(self) -> None:
        self.current.close()


class RocksHarness:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation = 0
        self.changelog: list[tuple[bytes, bytes | None]] = []
        self.current = PartitionStore(root / "0")

    def state(self) -> ReadableState:
        return self.current

    def commit(self, changes: list[tuple[str, Any]]) -> None:
        batch = [Change.of(key, value) for key, value in changes]
        self.changelog += [(c.raw_key, c.raw_value) for c in batch]  # what the host sends
        self.current.commit(batch)

    def reopen(self) -> None:
        self.current.close()
        self.generation += 1
        self.current = PartitionStore(self.root / str(self.generation))
        self.current.restore(self.changelog)

    def close(self) -> None:
        self.current.close()


class TestDictState(StateContract):
    @pytest.fixture
    def harness(self) -> DictHarness:
        return DictHarness()


class TestSqliteState(DurableStateContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> Iterator[SqliteHarness]:
        harness = SqliteHarness(tmp_path / "state.sqlite3")
        yield harness
        harness.close()


class TestPartitionStore(DurableStateContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> Iterator[RocksHarness]:
        harness = RocksHarness(tmp_path)
        yield harness
        harness.close()
