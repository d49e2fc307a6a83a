"""The stream worker's partition store: committed changes, restores, its bounded cache."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from streams import store as store_module
from streams.store import Change, PartitionStore, encode_key, encode_value


def test_commit_then_read_back_through_the_cache_and_from_rocksdb(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "s")
    assert store.get("rec/a") is None  # absent, and remembered as absent
    store.commit([Change.of("rec/a", {"n": 1}), Change.of("rec/b", [1, 2])])
    assert store.get("rec/a") == {"n": 1}
    store._cache.clear()  # from RocksDB, decoded again
    assert store.get("rec/a") == {"n": 1} and store.get("rec/b") == [1, 2]
    store.commit([Change.of("rec/a", None)])
    assert store.get("rec/a") is None
    store._cache.clear()
    assert store.get("rec/a") is None
    store.close()
    assert not (tmp_path / "s").exists()


def test_restore_copies_changelog_records_and_tombstones(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "s")
    store.get("k1")  # a cached absence must not survive a restore
    store.restore(
        [
            (encode_key("k1"), encode_value({"v": 1})),
            (encode_key("k2"), encode_value("x")),
            (encode_key("k2"), None),
        ]
    )
    assert store.get("k1") == {"v": 1}
    assert store.get("k2") is None
    store.close()


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "s")
    big = "x" * 1000
    store.commit([Change.of(f"k{i}", big) for i in range(10_000)])
    assert store._weight <= store_module.VALUE_CACHE_BYTES
    assert len(store._cache) < 10_000
    assert store.get("k0") == big  # evicted first, still in RocksDB
    store.close()


def test_a_fresh_store_is_empty_even_over_old_files(tmp_path: Path) -> None:
    first = PartitionStore(tmp_path / "s")
    first.commit([Change.of("k", 1)])
    first._db.close()  # a crash: the files stay
    again = PartitionStore(tmp_path / "s")
    assert again.get("k") is None
    again.close()


@given(st.text())
@example("rec/0011aabb")
@example('quote " and backslash \\')
@example("tab\tnewline\nnul\x00 del\x7f é ✓ 𝄞")
def test_keys_are_encoded_exactly_as_json_dumps_writes_them(key: str) -> None:
    """Changelogs written before the fast path hold json.dumps bytes: a restore must find
    the same keys."""
    assert encode_key(key) == json.dumps(key).encode()


def test_prefetched_keys_are_cached_as_reads_would_cache_them(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "s")
    store.commit([Change.of("rec/a", {"n": 1}), Change.of("rec/b", None), Change.of("c", 2)])
    store._cache.clear()
    store.prefetch(["rec/a", "rec/b", "missing", "rec/a"])
    assert {k: v for k, (v, _) in store._cache.items()} == {
        "rec/a": {"n": 1},
        "rec/b": store_module._ABSENT,
        "missing": store_module._ABSENT,
    }
    store._db.put(encode_key("rec/a"), encode_value({"n": 9}))  # behind the cache
    store.prefetch(["rec/a", "missing", "c"])  # what is cached is not read again
    assert [store.get(k) for k in ("rec/a", "rec/b", "missing", "c")] == [{"n": 1}, None, None, 2]
    store.close()
