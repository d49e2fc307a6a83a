"""The two key rings (see :mod:`reef.crypto.keyring` for the port and its contract).

:func:`open_keyring` picks one by what the log can do, not by its class: a log with the
:class:`~reef.log.base.KeyLookup` capability answers the latest value of a key directly
(the embedded log's table), so :class:`TableKeyRing` asks it on every lookup; any other
log is followed (:class:`FollowingKeyRing`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from reef.core.errors import UnknownTopicError
from reef.core.topics import KEYS
from reef.crypto.keyring import KeyRing
from reef.log.base import EventLog, KeyLookup

logger = logging.getLogger(__name__)


class TableKeyRing:
    """The embedded log's key table, asked on every lookup (no copy in memory)."""

    def __init__(self, log: KeyLookup) -> None:
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
    """Reads the key topic into memory on demand; tombstones remove entries.

    A lookup reads what was appended since the last read (a bounded read, up to the end
    offsets at that moment) when a key is missing or the last read began more than
    ``max_staleness_s`` ago, so a tombstone written by another replica takes effect here
    within that long. No background consumer: nothing to cancel half-started on close.
    """

    def __init__(self, log: EventLog, *, max_staleness_s: float = 1.0) -> None:
        self.log = log
        self.max_staleness_s = max_staleness_s
        self._keys: dict[str, bytes] = {}
        self._next: dict[int, int] = {}
        self._absent = False
        self._read_lock = asyncio.Lock()
        #: loop time at which the last completed read began (everything on the topic at
        #: that moment is applied); -inf: never read
        self._read_from = float("-inf")

    async def start(self) -> None:
        """Nothing to do yet: the topic is read at the first lookup."""

    async def close(self) -> None:
        self._keys.clear()

    async def get(self, record_id: str) -> bytes | None:
        return (await self.get_many([record_id])).get(record_id)

    async def get_many(self, record_ids: Iterable[str]) -> dict[str, bytes]:
        wanted = list(record_ids)
        now = asyncio.get_running_loop().time()
        if any(r not in self._keys for r in wanted) or (
            now - self._read_from > self.max_staleness_s
        ):
            await self.sync()
        return {r: self._keys[r] for r in wanted if r in self._keys}

    def forget(self, record_id: str) -> None:
        self._keys.pop(record_id, None)

    async def sync(self) -> None:
        """Apply everything on the topic when called (one read shared by concurrent calls)."""
        asked = asyncio.get_running_loop().time()
        async with self._read_lock:
            if self._absent or self._read_from >= asked:
                return  # a read that began after this call finished meanwhile
            began = asyncio.get_running_loop().time()
            try:
                ends = await self.log.end_offsets(KEYS)
            except UnknownTopicError:
                # a deployment from before erasure existed: nothing was ever sealed
                logger.warning("no %s topic: sealed records (if any) read as erased", KEYS)
                self._absent = True
                return
            if any(self._next.get(p, 0) < o for p, o in ends.items()):
                async for record in self.log.read(KEYS, start=dict(self._next), until=ends):
                    self._apply(record.key, record.value)
                self._next = {p: max(self._next.get(p, 0), o) for p, o in ends.items()}
            self._read_from = began

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        if value:
            self._keys[key.decode()] = value
        else:
            self._keys.pop(key.decode(), None)


def open_keyring(log: EventLog) -> KeyRing:
    """The key ring for this log (not started)."""
    if isinstance(log, KeyLookup):
        return TableKeyRing(log)
    return FollowingKeyRing(log)
