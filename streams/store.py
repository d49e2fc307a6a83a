"""A processor's state for one partition: a RocksDB copy of its committed changelog.

Keys and values are held exactly as the changelog carries them (JSON bytes: the key a
JSON string, the value a JSON document, a delete a tombstone), so a restore copies
records without decoding them and the changelog format stays what ``reef replay`` reads.

The store only ever holds committed state: the host restores it from the changelog read
``read_committed``, and applies a batch's writes only after the Kafka transaction that
carries them committed (:meth:`write`). It lives in the worker's data directory, which
is emptied at each start (:mod:`streams.datadir`), and skips RocksDB's write-ahead log:
a crash loses nothing the changelog does not hold.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteBatch, WriteOptions

#: per store (one per processor and partition): memtables and block cache, so the memory
#: a worker holds for its tables is bounded (RocksDB's defaults: 3 x 64 MB and 2 GB)
WRITE_BUFFER_BYTES: Final = 4 * 1024 * 1024
MAX_WRITE_BUFFERS: Final = 2
BLOCK_CACHE_BYTES: Final = 8 * 1024 * 1024


def encode_key(key: str) -> bytes:
    return json.dumps(key).encode()


def encode_value(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


class PartitionStore:
    """:class:`reef.processors.state.ReadableState` over one RocksDB, plus committed writes."""

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

    def get(self, key: str) -> Any:
        raw = self._db.get(encode_key(key))
        return None if raw is None else json.loads(raw)

    def write(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write changelog records (key bytes, value bytes; None: a tombstone): a restore,
        or a batch's writes once their transaction committed."""
        batch = WriteBatch(raw_mode=True)
        for key, value in records:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._db.write(batch)

    def close(self) -> None:
        self._db.close()
        shutil.rmtree(self.path, ignore_errors=True)
