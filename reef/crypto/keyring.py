"""Where data keys live, and the one way readers look them up.

Writers put a record's data key on the compacted key topic (``reef.keys``, key = record
id) in the same append as the record; erasure appends a tombstone. On Kafka the cleaner
then drops the superseded key from the broker's files; on the embedded log the key topic
is a table whose rows are really DELETEd (``secure_delete``: the bytes are zeroed).

:class:`KeyRing` is the readers' view: ``get`` answers the key, or None when the record
has no key (erased, or never sealed).

The rings themselves live in :mod:`reef.crypto.rings`:

- ``TableKeyRing`` (a log that looks keys up directly: the embedded one) asks the
  table every time: nothing is cached.
- ``FollowingKeyRing`` (Kafka, or any log) reads the topic into a dict from the
  beginning, on demand: at a lookup that misses, or when its last read began more than
  a second ago; a tombstone removes the entry. A process that only writes (an API
  replica nobody reads records from) never reads its own keys back. A key is
  acknowledged with its record, so once a reader sees a record its key is at most one
  read away; still missing after it, the answer is None. The replica that erases
  forgets the key at once; other replicas within ``max_staleness_s`` (one second).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from reef.core.topics import KEYS
from reef.log.base import PendingAppend

KEY_HEADER = ("reef-record-type", b"data-key")


def key_record(record_id: str, key: bytes) -> PendingAppend:
    """The append that stores ``record_id``'s data key."""
    return PendingAppend(KEYS, record_id.encode(), key, (KEY_HEADER,))


def tombstone_record(record_id: str) -> PendingAppend:
    """The append that destroys ``record_id``'s data key (a Kafka tombstone)."""
    return PendingAppend(KEYS, record_id.encode(), None)


class KeyRing(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def get(self, record_id: str) -> bytes | None:
        """The record's data key; None when it has none (erased or never sealed)."""
        ...

    async def get_many(self, record_ids: Iterable[str]) -> dict[str, bytes]:
        """The keys that exist among ``record_ids``."""
        ...

    def forget(self, record_id: str) -> None:
        """Drop any copy held in memory (the erasing replica calls it at once)."""
