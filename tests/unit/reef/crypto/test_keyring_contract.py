"""The embedded log's key ring passes the key-ring contract.

Only :class:`TableKeyRing` runs on the embedded log (``open_keyring`` chooses it): the
key table really DELETEs an erased key's row, so there is no tombstone record for a
following ring to read, and a follower would keep the erased key. The following ring's
contract runs on Kafka (tests/integration/test_keyring_kafka.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reef.contracts.keyring import KeyRingContract, Rig
from reef.core.topics import LOG_TOPICS
from reef.crypto.rings import TableKeyRing, open_keyring
from reef.log.embedded import EmbeddedLog


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[EmbeddedLog]:
    log = EmbeddedLog(tmp_path / "log.sqlite3")
    await log.start()
    await log.ensure_topics(list(LOG_TOPICS))
    try:
        yield log
    finally:
        await log.close()


class TestTableKeyRing(KeyRingContract):
    @pytest.fixture
    async def rig(self, embedded: EmbeddedLog) -> AsyncIterator[Rig]:
        ring = open_keyring(embedded)  # the embedded log answers keys directly
        assert isinstance(ring, TableKeyRing)
        await ring.start()
        yield Rig(embedded, ring)
        await ring.close()
