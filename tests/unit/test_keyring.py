"""Key rings: the embedded key table (real DELETE, zeroed bytes) and the following ring
over Kafka's compacted key topic (tombstones remove keys)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from reef.core.errors import LogError
from reef.core.topics import INFERENCE, KEYS, LOG_TOPICS, key_topic_configs
from reef.crypto import key_record, new_data_key, tombstone_record
from reef.crypto.rings import FollowingKeyRing, TableKeyRing, open_keyring
from reef.log.base import PendingAppend
from reef.log.embedded import EmbeddedLog, connect
from reef.log.kafka import KafkaLog


async def test_table_key_ring_deletes_and_zeroes_the_key(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    log = EmbeddedLog(path)
    await log.start()
    try:
        await log.ensure_topics(list(LOG_TOPICS))
        ring = open_keyring(log)
        assert isinstance(ring, TableKeyRing)
        await ring.start()
        keep, gone = new_data_key(), new_data_key()
        positions = await log.append_many([key_record("keep", keep), key_record("gone", gone)])
        assert [p.topic for p in positions] == [KEYS, KEYS]
        assert await ring.get("gone") == gone
        assert await ring.get_many(["keep", "gone", "never"]) == {"keep": keep, "gone": gone}
        await log.append_many([tombstone_record("gone")])
        assert await ring.get("gone") is None
        assert await ring.get("keep") == keep
        assert [r.key async for r in log.read(KEYS)] == [b"keep"]  # read as a compacted log
        assert await log.scrub()
        raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
        assert gone not in raw  # secure_delete zeroed it, the truncated WAL holds no copy
        assert keep in raw
        with pytest.raises(LogError):
            await log.append_many([PendingAppend(INFERENCE, b"x", None)])  # not compacted
    finally:
        await log.close()
    conn = connect(path)
    try:
        assert conn.execute("PRAGMA secure_delete").fetchone() == (1,)
    finally:
        conn.close()


async def test_following_ring_on_the_embedded_log_reads_the_table(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "log.sqlite3")
    await log.start()
    try:
        await log.ensure_topics(list(LOG_TOPICS))
        first = new_data_key()
        await log.append_many([key_record("a", first)])
        ring = FollowingKeyRing(log)
        await ring.start()
        try:
            assert await ring.get("a") == first
            later = new_data_key()
            await log.append_many([key_record("b", later)])
            assert await ring.get("b") == later  # a miss catches up first
        finally:
            await ring.close()
    finally:
        await log.close()


@pytest.mark.kafka
async def test_following_ring_on_kafka_drops_tombstoned_keys(kafka_bootstrap: str) -> None:
    prefix = f"keyring-{uuid.uuid4().hex[:8]}."
    log = KafkaLog(
        kafka_bootstrap, topic_prefix=prefix, topic_configs={KEYS: key_topic_configs(1000)}
    )
    await log.start()
    try:
        await log.ensure_topics([KEYS])
        key_a, key_b = new_data_key(), new_data_key()
        await log.append_many([key_record("a", key_a), key_record("b", key_b)])
        ring = open_keyring(log)
        assert isinstance(ring, FollowingKeyRing)
        await ring.start()
        try:
            assert await ring.get_many(["a", "b"]) == {"a": key_a, "b": key_b}
            await log.append_many([tombstone_record("a")])
            await ring.sync()
            assert await ring.get("a") is None  # the follower applied the tombstone
            assert await ring.get("b") == key_b
            key_c = new_data_key()
            await log.append_many([key_record("c", key_c)])
            assert await ring.get("c") == key_c
        finally:
            await ring.close()
        # a ring that holds a key learns of its tombstone once its read is stale
        eager = FollowingKeyRing(log, max_staleness_s=0.0)
        await eager.start()
        assert await eager.get("b") == key_b
        await log.append_many([tombstone_record("b")])
        assert await eager.get("b") is None
        await eager.close()
        values = {r.key: r.value async for r in log.read(KEYS)}
        assert values[b"a"] == b""  # a tombstone reads back empty
    finally:
        await log.close()
