"""The processor-state contract: one suite every host's state must pass (not collected).

A processor step reads and writes a :class:`~reef.core.state.KeyValueState`; each host
gives it a :class:`~reef.core.state.WriteBuffer` over its own readable state and, once
the batch's outputs are committed, commits the buffer's changes to that state. Whatever
the storage (a dict in replay, SQLite rows on the embedded host, RocksDB restored from a
changelog on the Kafka host), the step must see the same values, or replay would not
equal the live state.

Subclass :class:`StateContract` (or :class:`DurableStateContract`, for state that must
survive a restart) in a ``test_*.py`` module and provide a ``harness`` fixture.
"""

from __future__ import annotations

from typing import Any, Protocol

from reef.core.state import ReadableState, WriteBuffer

#: JSON values of the shapes the join and the chain store
VALUES: dict[str, Any] = {
    "rec/a": {"receipt": "r-1", "turns": [{"role": "user", "text": "hé ✓"}], "n": 3},
    "rec/b": ["x", 1, 2.5, True, None, {"nested": {"deep": []}}],
    "chain/head": "release-0123",
    "count": 2**53 + 1,
    "ratio": 0.1,
    "flag": False,
    "unicode/键": "値",
}


class StateHarness(Protocol):
    """A host's state, driven the way the host drives it."""

    def state(self) -> ReadableState:
        """What the host gives a step to read (under a write buffer)."""
        ...

    def commit(self, changes: list[tuple[str, Any]]) -> None:
        """Commit a batch's changes: ``(key, value)``, value None deletes."""
        ...

    def reopen(self) -> None:
        """Drop everything in memory and come back from durable storage (a restart)."""
        ...


def apply(harness: StateHarness, writes: dict[str, Any]) -> None:
    """One step's writes through a write buffer, then the host's commit."""
    buffer = WriteBuffer(harness.state())
    for key, value in writes.items():
        if value is None:
            buffer.delete(key)
        else:
            buffer.set(key, value)
    harness.commit(list(buffer.changes()))


class StateContract:
    """Tests every processor state must pass, given the subclass's ``harness`` fixture."""

    def test_an_absent_key_reads_none(self, harness: StateHarness) -> None:
        assert harness.state().get("never/written") is None

    def test_committed_values_read_back_equal(self, harness: StateHarness) -> None:
        apply(harness, VALUES)
        state = harness.state()
        for key, value in VALUES.items():
            got = state.get(key)
            assert got == value and type(got) is type(value), key

    def test_overwrite_and_delete(self, harness: StateHarness) -> None:
        apply(harness, {"k": {"v": 1}, "gone": "x"})
        apply(harness, {"k": {"v": 2}, "gone": None, "never": None})
        state = harness.state()
        assert state.get("k") == {"v": 2}
        assert state.get("gone") is None
        assert state.get("never") is None

    def test_a_read_absence_does_not_hide_a_later_commit(self, harness: StateHarness) -> None:
        assert harness.state().get("late") is None  # a cache may remember the absence
        apply(harness, {"late": [1]})
        assert harness.state().get("late") == [1]

    def test_buffered_writes_are_seen_by_the_step_but_not_committed(
        self, harness: StateHarness
    ) -> None:
        apply(harness, {"k": "old"})
        buffer = WriteBuffer(harness.state())
        buffer.set("k", "new")
        buffer.set("fresh", 1)
        assert buffer.get("k") == "new" and buffer.get("fresh") == 1
        # the host commits only after the batch's outputs: until then the base is unchanged
        assert harness.state().get("k") == "old"
        assert harness.state().get("fresh") is None

    def test_keys_are_exact(self, harness: StateHarness) -> None:
        apply(harness, {"rec/a": 1, "rec/ab": 2, "Rec/a": 3})
        state = harness.state()
        assert [state.get(k) for k in ("rec/a", "rec/ab", "Rec/a", "rec/")] == [1, 2, 3, None]


class DurableStateContract(StateContract):
    def test_committed_state_survives_a_restart(self, harness: StateHarness) -> None:
        apply(harness, VALUES)
        apply(harness, {"rec/a": None, "count": 7})
        harness.reopen()
        state = harness.state()
        assert state.get("rec/a") is None
        assert state.get("count") == 7
        for key in VALUES.keys() - {"rec/a", "count"}:
            assert state.get(key) == VALUES[key], key

    def test_uncommitted_writes_are_lost_by_a_restart(self, harness: StateHarness) -> None:
        apply(harness, {"k": "committed"})
        buffer = WriteBuffer(harness.state())
        buffer.set("k", "in flight")  # the crash comes before the host's commit
        harness.reopen()
        assert harness.state().get("k") == "committed"
