"""A processor's state read on demand from the embedded log's ``processor_state`` table.

The table is the state: nothing is loaded at start, and memory holds only a bounded LRU
cache of decoded values (absent keys included, so the join's many look-ups of keys not
written yet cost one query each, once). The cache is weighed by the JSON size of each
value; a value larger than the whole budget is never cached.

This class only reads. The host (:mod:`reef.hosts.embedded`) buffers a batch's
writes in a :class:`reef.core.state.WriteBuffer`, stores them in the transaction
that also appends the outputs and the input positions, and only after that COMMIT calls
:meth:`SqliteState.committed`, so the cache never holds a value the table does not.
The cache assumes that its runtime is the only writer of its processor's rows (one
runtime per processor and log, as the embedded host runs them).
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from reef.hosts.state_codec import load_value

#: default cache budget, in bytes of JSON text (decoded objects take a few times more)
DEFAULT_CACHE_BYTES: Final = 8 * 1024 * 1024
#: weight added per cached entry (key, node and bookkeeping)
_ENTRY_WEIGHT: Final = 100

_SELECT: Final = "SELECT value FROM processor_state WHERE processor = ? AND key = ?"
_SELECT_MANY: Final = "SELECT key, value FROM processor_state WHERE processor = ? AND key IN "
#: keys per prefetch query (well under SQLite's limit on bound parameters)
_PREFETCH_CHUNK: Final = 500


class _Absent:
    """The cached fact that a key has no value."""


_ABSENT: Final = _Absent()


class SqliteState:
    """:class:`reef.core.state.ReadableState` over one processor's table rows."""

    def __init__(
        self, path: Path, processor: str, *, cache_bytes: int = DEFAULT_CACHE_BYTES
    ) -> None:
        self.path = path
        self.processor = processor
        self.cache_bytes = cache_bytes
        #: key -> (decoded value or absent, weight); least recently used first
        self._cache: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._weight = 0
        self._db: sqlite3.Connection | None = None
        self._cursor: sqlite3.Cursor | None = None
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> Any:
        entry = self._cache.get(key)
        if entry is not None:
            self._cache.move_to_end(key)
            self.hits += 1
            value = entry[0]
            return None if value is _ABSENT else value
        self.misses += 1
        # fetchall: the statement runs to its end, so no read snapshot stays open between
        # calls (a held snapshot would hide later commits and block WAL checkpoints)
        rows = self._reader().execute(_SELECT, (self.processor, key)).fetchall()
        if not rows:
            self._remember(key, _ABSENT, len(key))
            return None
        text = str(rows[0][0])
        value = load_value(text)
        self._remember(key, value, len(text))
        return value

    def prefetch(self, keys: Iterable[str]) -> None:
        """Read the keys not cached yet, a few hundred per query, and cache each as
        :meth:`get` would (absent ones too): what a batch's steps will read, named by a
        :class:`reef.core.state.ReadHinting` processor, costs a few queries, not one a key."""
        wanted = [key for key in dict.fromkeys(keys) if key not in self._cache]
        for start in range(0, len(wanted), _PREFETCH_CHUNK):
            self._fetch(wanted[start : start + _PREFETCH_CHUNK])

    def _fetch(self, keys: Sequence[str]) -> None:
        self.misses += len(keys)
        statement = _SELECT_MANY + "(" + ",".join("?" * len(keys)) + ")"  # placeholders only
        found = dict(self._reader().execute(statement, (self.processor, *keys)).fetchall())
        for key in keys:
            text = found.get(key)
            if text is None:
                self._remember(key, _ABSENT, len(key))
            else:
                text = str(text)
                self._remember(key, load_value(text), len(text))

    def committed(self, changes: Iterable[tuple[str, Any, int]]) -> None:
        """Bring the cache up to a COMMIT: ``(key, value or None if deleted, JSON size)``."""
        for key, value, size in changes:
            if value is None:
                self._remember(key, _ABSENT, len(key))
            else:
                self._remember(key, value, size)

    def cached(self) -> dict[str, Any]:
        """The values held in memory now (absent keys left out): diagnostics and tests."""
        return {k: v for k, (v, _) in self._cache.items() if v is not _ABSENT}

    @property
    def cached_bytes(self) -> int:
        return self._weight

    def close(self) -> None:
        self._cache.clear()
        self._weight = 0
        self._cursor = None
        if self._db is not None:
            db, self._db = self._db, None
            db.close()

    def _reader(self) -> sqlite3.Cursor:
        """One cursor on one read-only connection, opened at the first read."""
        if self._cursor is None:
            db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            db.execute("PRAGMA query_only=ON")
            self._db, self._cursor = db, db.cursor()
        return self._cursor

    def _remember(self, key: str, value: Any, size: int) -> None:
        """Cache ``value`` (replacing what was cached); one too large only drops the old."""
        self._forget(key)
        weight = size + _ENTRY_WEIGHT
        if weight > self.cache_bytes:
            return
        self._cache[key] = (value, weight)
        self._weight += weight
        while self._weight > self.cache_bytes:
            _, (_, dropped) = self._cache.popitem(last=False)
            self._weight -= dropped

    def _forget(self, key: str) -> None:
        entry = self._cache.pop(key, None)
        if entry is not None:
            self._weight -= entry[1]
