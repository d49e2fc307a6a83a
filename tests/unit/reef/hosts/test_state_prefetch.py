"""Read hints: the join names the keys its steps read; SQLite state fetches them at once.

* :meth:`SqliteState.prefetch` caches exactly what :meth:`SqliteState.get` would (values,
  absent keys, this processor's rows only), in a few queries, within the cache budget;
* every key a join step reads on the common paths (an exchange recorded, a report joined,
  resent or conflicting; not the retry of parked reports) is one it names in ``reads``,
  so the embedded host's batch prefetch leaves none of them to a query of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reef.core.events import Event
from reef.core.join import JoinProcessor, JoinSettings
from reef.core.state import DictState, ReadHinting
from reef.hosts.embedded import _create_state_table
from reef.hosts.sqlite_state import SqliteState
from reef.log.embedded import connect
from reef_dev.events import inference, receipt, report
from tests.support.join import T0, at


def _table(tmp_path: Path, rows: dict[str, Any], processor: str = "p") -> Path:
    path = tmp_path / "state.sqlite3"
    db = connect(path)
    _create_state_table(db)
    db.executemany(
        "INSERT OR REPLACE INTO processor_state (processor, key, value) VALUES (?, ?, ?)",
        [(processor, k, json.dumps(v)) for k, v in rows.items()],
    )
    db.close()
    return path


def test_prefetched_keys_are_cached_as_reads_would_cache_them(tmp_path: Path) -> None:
    rows = {f"k{i}": {"n": i} for i in range(1200)}
    path = _table(tmp_path, rows)
    _table(tmp_path, {"other": "another processor's"}, processor="q")
    state = SqliteState(path, "p")
    try:
        wanted = [*rows, "missing", "other", "k3"]  # more than one query's worth, a repeat
        state.prefetch(wanted)
        assert state.misses == len(rows) + 2
        assert state.cached() == rows
        assert [state.get(k) for k in wanted] == [*rows.values(), None, None, {"n": 3}]
        assert state.misses == len(rows) + 2  # every read answered from the cache
        state.prefetch(["k1", "missing"])  # cached already: nothing is read again
        assert state.misses == len(rows) + 2
    finally:
        state.close()


def test_a_prefetch_larger_than_the_budget_stays_within_it(tmp_path: Path) -> None:
    rows = {f"k{i}": "x" * 50 for i in range(200)}
    state = SqliteState(_table(tmp_path, rows), "p", cache_bytes=2_000)
    try:
        state.prefetch(rows)
        assert state.cached_bytes <= 2_000
        assert all(state.get(k) == v for k, v in rows.items())  # evicted ones read back
    finally:
        state.close()


class _Recording(DictState):
    def __init__(self) -> None:
        super().__init__()
        self.read: list[str] = []

    def get(self, key: str) -> Any:
        self.read.append(key)
        return super().get(key)


def _workload() -> list[Event]:
    events: list[Event] = []
    for i in range(6):
        scenario = f"hint-{i % 2}"
        rec = receipt(scenario, i)
        events.append(inference(scenario, rec, at(i)))
        events.append(report(scenario, f"r{i}", [rec], at(i)))
        events.append(report(scenario, f"r{i}", [rec], at(i)))  # a resend
    events.append(report("hint-0", "r1", [receipt("hint-0", 9)], T0))  # a conflict
    return events


def test_the_join_names_the_keys_its_steps_read() -> None:
    join = JoinProcessor(JoinSettings())
    assert isinstance(join, ReadHinting)
    state = _Recording()
    for event in _workload():
        state.read.clear()
        join.step(state, event)
        named = set(join.reads(event))
        rare = {k for k in state.read if k.startswith(("conflict/", "conv/"))}
        assert set(state.read) - rare <= named, event
