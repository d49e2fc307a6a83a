"""Where data keys live, and the one way readers look them up.

Writers put a record's data key on the compacted key topic (``reef.keys``, key = record
id) in the same append as the record; erasure appends a tombstone. On Kafka the cleaner
then drops the superseded key from the broker's files; on the embedded log the key topic
is a table whose rows are really DELETEd (``secure_delete``: the bytes are zeroed).

:class:`KeyRing` is the readers' view: ``get`` answers the key, or None when the record
has no key (erased, or never sealed).

- :class:`TableKeyRing` (embedded) asks the table every time: nothing is cached.
- :class:`FollowingKeyRing` (Kafka, or any log) follows the topic into a dict from the
  beginning; a tombstone removes the entry. It starts following at its first lookup, so
  a process that only writes (an API replica nobody reads records from) does not fetch
  back every key it appends. A miss first catches up to the topic's end
  offsets (a key is acknowledged with its record, so once a reader sees a record its key
  is at most one catch-up away), then answers None. The replica that erases forgets the
  key at once; other replicas drop it when they follow the tombstone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Protocol

from reef.errors import UnknownTopicError
from reef.log.base import EventLog, PendingAppend
from reef.log.embedded import EmbeddedLog
from reef.topics import KEYS

logger = logging.getLogger(__name__)

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


class TableKeyRing:
    """The embedded log's key table, asked on every lookup (no copy in memory)."""

    def __init__(self, log: EmbeddedLog) -> None:
        self.log = log

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def get(self, record_id: str) -> bytes | None:
        return (await self.get_many([record_id])).get(record_id)

    async def get_many(self, record_ids: Iterable[str]) -> dict[str, bytes]:
        found = await self.log.compacted_values(KEYS, [r.encode() for r in record_ids])
        return {key.decode(): value for key, value in found.items()}

    def forget(self, record_id: str) -> None:
        return None


class FollowingKeyRing:
    """Follows the key topic into memory; tombstones remove entries."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self._keys: dict[str, bytes] = {}
        self._next: dict[int, int] = {}
        self._moved = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._absent = False
        self._starting = asyncio.Lock()

    async def start(self) -> None:
        """Nothing to do yet: following begins with the first lookup."""

    async def _begin(self) -> None:
        try:
            ends = await self.log.end_offsets(KEYS)
        except UnknownTopicError:
            # a deployment from before erasure existed: nothing was ever sealed
            logger.warning("no %s topic: sealed records (if any) read as erased", KEYS)
            self._absent = True
            return
        async for record in self.log.read(KEYS, until=ends):
            self._apply(record.key, record.value, record.partition, record.offset)
        self._next = {p: max(self._next.get(p, 0), o) for p, o in ends.items()}
        self._task = asyncio.create_task(self._follow(dict(ends)), name="keyring:follow")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._keys.clear()

    async def get(self, record_id: str) -> bytes | None:
        return (await self.get_many([record_id])).get(record_id)

    async def get_many(self, record_ids: Iterable[str]) -> dict[str, bytes]:
        wanted = list(record_ids)
        if self._task is None and not self._absent:
            async with self._starting:
                if self._task is None and not self._absent:
                    await self._begin()
        if self._absent:
            return {}
        if any(r not in self._keys for r in wanted):
            await self.sync()
        return {r: self._keys[r] for r in wanted if r in self._keys}

    def forget(self, record_id: str) -> None:
        self._keys.pop(record_id, None)

    def _apply(self, key: bytes | None, value: bytes | None, partition: int, offset: int) -> None:
        if key is not None:
            if value:
                self._keys[key.decode()] = value
            else:
                self._keys.pop(key.decode(), None)
        self._next[partition] = offset + 1

    async def sync(self) -> None:
        """Wait until everything on the topic when called has been applied (30 s at most).

        A hit is answered from memory: a tombstone written by another replica takes
        effect here once followed (one fetch, about 200 ms), or at the next ``sync``.
        """
        if self._task is None and not self._absent:
            await self.get_many([])  # begins following
        if self._absent:
            return
        ends = await self.log.end_offsets(KEYS)
        if self._task is None or self._task.done():
            raise RuntimeError("the key ring is not following its topic")

        def reached() -> bool:
            return all(self._next.get(p, 0) >= o for p, o in ends.items())

        async with asyncio.timeout(30.0), self._moved:
            await self._moved.wait_for(reached)

    async def _follow(self, start: Mapping[int, int]) -> None:
        records = self.log.read(KEYS, start=start, follow=True)
        try:
            async for record in records:
                async with self._moved:
                    self._apply(record.key, record.value, record.partition, record.offset)
                    self._moved.notify_all()
        finally:
            # cancelled while the reader waits: close it now (its consumer and sockets),
            # not whenever the garbage collector finalises the generator
            aclose = getattr(records, "aclose", None)
            if aclose is not None:
                await aclose()


def open_keyring(log: EventLog) -> KeyRing:
    """The key ring for this log (not started)."""
    if isinstance(log, EmbeddedLog):
        return TableKeyRing(log)
    return FollowingKeyRing(log)
