"""The key-ring contract: one suite both rings pass on every log they run on (not collected).

A reader opens a sealed body with the record's data key from its ring; erasure appends a
tombstone for the key. Whatever the ring (the embedded table asked on each lookup, or a
follower of the compacted key topic), a reader must find every key appended with its
record, never find an erased one once the ring has caught up, and the replica that
erases must stop finding it at once (``forget``).

Subclass :class:`KeyRingContract` in a ``test_*.py`` module and provide a ``rig``
fixture: a started log with the key topic and a started ring over it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from reef.crypto import key_record, new_data_key, tombstone_record
from reef.crypto.keyring import KeyRing
from reef.crypto.rings import FollowingKeyRing
from reef.log.base import EventLog


@dataclass
class Rig:
    log: EventLog
    ring: KeyRing

    async def caught_up(self) -> None:
        """What a reader may wait for: a follower's next read (bounded by its staleness)."""
        if isinstance(self.ring, FollowingKeyRing):
            await self.ring.sync()


class KeyRingContract:
    pytestmark = pytest.mark.asyncio

    async def test_a_key_appended_with_its_record_is_found(self, rig: Rig) -> None:
        first, second = new_data_key(), new_data_key()
        await rig.log.append_many([key_record("rec-1", first)])
        assert await rig.ring.get("rec-1") == first
        await rig.log.append_many([key_record("rec-2", second)])  # after the ring read
        assert await rig.ring.get("rec-2") == second  # a miss catches up first
        assert await rig.ring.get_many(["rec-1", "rec-2", "never"]) == {
            "rec-1": first,
            "rec-2": second,
        }

    async def test_a_record_never_sealed_has_no_key(self, rig: Rig) -> None:
        assert await rig.ring.get("never-sealed") is None
        assert await rig.ring.get_many([]) == {}

    async def test_an_erased_key_is_gone_once_the_ring_caught_up(self, rig: Rig) -> None:
        keep, gone = new_data_key(), new_data_key()
        await rig.log.append_many([key_record("keep", keep), key_record("gone", gone)])
        assert await rig.ring.get_many(["keep", "gone"]) == {"keep": keep, "gone": gone}
        await rig.log.append_many([tombstone_record("gone")])
        await rig.caught_up()
        assert await rig.ring.get("gone") is None
        assert await rig.ring.get("keep") == keep

    async def test_the_erasing_replica_forgets_at_once(self, rig: Rig) -> None:
        key = new_data_key()
        await rig.log.append_many([key_record("erased", key)])
        assert await rig.ring.get("erased") == key
        await rig.log.append_many([tombstone_record("erased")])
        rig.ring.forget("erased")
        assert await rig.ring.get("erased") is None

    async def test_the_latest_key_of_a_record_wins(self, rig: Rig) -> None:
        old, new = new_data_key(), new_data_key()
        await rig.log.append_many([key_record("rekeyed", old)])
        await rig.log.append_many([key_record("rekeyed", new)])
        await rig.caught_up()
        assert await rig.ring.get("rekeyed") == new
