"""A processor's state for one partition: a RocksDB copy of its committed changelog.

Keys and values are held exactly as the changelog carries them (JSON bytes: the key a
JSON string, the value a JSON document, a delete a tombstone), so a restore copies
records without decoding them and the changelog format stays what ``reef replay`` reads.

The store only ever holds committed state: the host restores it from the changelog read
``read_committed``, and applies a batch's writes only after the Kafka transaction that
carries them committed (:meth:`commit`). It lives in the worker's data directory, which
is emptied at each start (:mod:`streams.datadir`), and skips RocksDB's write-ahead log:
a crash loses nothing the changelog does not hold. Within one process a store outlives a
rebalance that gives its partition back to the same worker: the host then reads the
changelog on from :attr:`PartitionStore.position` instead of from the start.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteBatch, WriteOptions

from reef.hosts.state_codec import dump_value, load_value

#: per store (one per processor and partition): memtables and block cache, so the memory
#: a worker holds for its tables is bounded (RocksDB's defaults: 3 x 64 MB and 2 GB)
WRITE_BUFFER_BYTES: Final = 4 * 1024 * 1024
MAX_WRITE_BUFFERS: Final = 2
BLOCK_CACHE_BYTES: Final = 8 * 1024 * 1024
#: decoded values kept in memory per store, weighed by their JSON bytes (absent keys too:
#: the join looks up many keys not written yet)
VALUE_CACHE_BYTES: Final = 4 * 1024 * 1024
_ENTRY_WEIGHT: Final = 100
_ABSENT: Final = object()


#: characters a JSON string may hold as they are, with ``json.dumps``'s default
#: ``ensure_ascii``: printable ASCII but the quote and the backslash
_PLAIN: Final = frozenset(chr(c) for c in range(0x20, 0x7F)) - {'"', "\\"}


def encode_key(key: str) -> bytes:
    """``json.dumps(key)`` as bytes, exactly (the changelogs hold keys so): a key of plain
    characters (every key Reef's processors write) is quoted directly, several times
    faster; any other goes through ``json.dumps``."""
    if _PLAIN.issuperset(key):
        return b'"' + key.encode() + b'"'
    return json.dumps(key).encode()


def encode_value(value: Any) -> bytes:
    return dump_value(value)


@dataclass(frozen=True, slots=True)
class Change:
    """One key's new value (None: deleted), decoded and as its changelog record."""

    key: str
    value: Any
    raw_key: bytes
    raw_value: bytes | None

    @classmethod
    def of(cls, key: str, value: Any) -> Change:
        return cls(key, value, encode_key(key), None if value is None else encode_value(value))


class PartitionStore:
    """:class:`reef.core.state.ReadableState` over one RocksDB, plus committed writes."""

    def __init__(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_write_buffer_size(WRITE_BUFFER_BYTES)
        options.set_max_write_buffer_number(MAX_WRITE_BUFFERS)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(BLOCK_CACHE_BYTES))
        options.set_block_based_table_factory(table)
        self.path = path
        self._db = Rdict(str(path), options)
        unlogged = WriteOptions()
        unlogged.disable_wal = True  # type: ignore[method-assign,assignment]  # a property (the stub says method)
        self._db.set_write_options(unlogged)
        #: key -> (decoded value or _ABSENT, weight); least recently used first
        self._cache: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._weight = 0
        #: the changelog offset this copy is complete up to: every committed record below
        #: it is reflected here (a restore reads on from it; the host advances it over the
        #: records its own committed transactions wrote)
        self.position = 0
        #: when the position last advanced (monotonic seconds): see ``fresh``
        self.synced_at = time.monotonic()

    def get(self, key: str) -> Any:
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            value = cached[0]
        else:
            raw = self._db.get(encode_key(key))
            value = _ABSENT if raw is None else load_value(raw)
            self._remember(key, value, 0 if raw is None else len(raw))
        return None if value is _ABSENT else value

    def prefetch(self, keys: Iterable[str]) -> None:
        """Read the keys not cached yet in one RocksDB ``multi_get`` and cache each as
        :meth:`get` would (absent ones too): the keys a batch's steps will read, named by a
        :class:`reef.core.state.ReadHinting` processor, cost one call, not one a key."""
        wanted = [key for key in dict.fromkeys(keys) if key not in self._cache]
        if not wanted:
            return
        raws: list[bytes | None] = self._db.get([encode_key(key) for key in wanted]) or []
        for key, raw in zip(wanted, raws, strict=True):
            if raw is None:
                self._remember(key, _ABSENT, 0)
            else:
                self._remember(key, load_value(raw), len(raw))

    def _remember(self, key: str, value: Any, size: int) -> None:
        weight = size + _ENTRY_WEIGHT
        old = self._cache.pop(key, None)
        if old is not None:
            self._weight -= old[1]
        if weight > VALUE_CACHE_BYTES:
            return
        self._cache[key] = (value, weight)
        self._weight += weight
        while self._weight > VALUE_CACHE_BYTES:
            _, (_, dropped) = self._cache.popitem(last=False)
            self._weight -= dropped

    def restore(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Copy changelog records in (key bytes, value bytes; None: a tombstone)."""
        batch = WriteBatch(raw_mode=True)
        for key, value in records:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._cache.clear()
        self._weight = 0
        self._db.write(batch)

    def commit(self, changes: Iterable[Change], position: int | None = None) -> None:
        """Write a batch's changes once the transaction that carries them committed;
        ``position``: the changelog offset after the records that transaction wrote."""
        batch = WriteBatch(raw_mode=True)
        for change in changes:
            if change.raw_value is None:
                batch.delete(change.raw_key)
                self._remember(change.key, _ABSENT, 0)
            else:
                batch.put(change.raw_key, change.raw_value)
                self._remember(change.key, change.value, len(change.raw_value))
        self._db.write(batch)
        if position is not None:
            self.caught_up(position)

    def caught_up(self, position: int) -> None:
        """Every committed changelog record below ``position`` is reflected here."""
        self.position = max(self.position, position)
        self.synced_at = time.monotonic()

    def fresh(self, max_age_s: float) -> bool:
        """Whether reading on from :attr:`position` still yields the state: true while the
        copy was synced within ``max_age_s``, kept well under the changelog's
        ``delete.retention.ms`` (Kafka's default: 24 h), after which compaction may drop
        a tombstone written past the position, and the deleted key would stay here."""
        return time.monotonic() - self.synced_at <= max_age_s

    def close(self) -> None:
        self._db.close()
        shutil.rmtree(self.path, ignore_errors=True)
