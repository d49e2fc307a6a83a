"""The embedded key table really deletes: an erased key's bytes are zeroed in the file.

What every ring must do is the key-ring contract (reef/contracts/keyring.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reef.core.errors import LogError
from reef.core.topics import INFERENCE, KEYS, LOG_TOPICS
from reef.crypto import key_record, new_data_key, tombstone_record
from reef.crypto.rings import TableKeyRing, open_keyring
from reef.log.base import PendingAppend
from reef.log.embedded import EmbeddedLog, connect


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
