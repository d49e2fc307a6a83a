"""The store skips the claim check's thread only for bodies that fit inline.

Exchanges whose bodies fit are appended without the artifact store; one body over the
threshold (sealed or not, including multi-byte text whose character count alone fits)
is still offloaded, and reads back whole.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from reef.artifacts.claimcheck import ClaimCheck
from reef.artifacts.local import LocalArtifactStore
from reef.codec import EventCodec
from reef.core.events import InferenceRecorded, utc_now
from reef.core.topics import INFERENCE, LOG_TOPICS
from reef.crypto.rings import TableKeyRing
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef_dev.events import chat_request, inference

THRESHOLD = 600


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[EmbeddedLog]:
    log = EmbeddedLog(tmp_path / "log.sqlite3", partitions=1)
    await log.start()
    await log.ensure_topics(list(LOG_TOPICS))
    try:
        yield log
    finally:
        await log.close()


def exchange(receipt: str, text: str) -> InferenceRecorded:
    """An exchange whose request carries ``text`` as UTF-8 (as a client sends it)."""
    event = inference("s", receipt, utc_now())
    request = json.dumps(chat_request([{"role": "user", "content": text}]), ensure_ascii=False)
    return replace(event, request_json=request)


async def stored(log: EmbeddedLog) -> dict[str, InferenceRecorded]:
    """The events as the log holds them (references not resolved)."""
    out = {}
    async for record in log.read(INFERENCE):
        event = EventCodec().decode(record.value)
        assert isinstance(event, InferenceRecorded)
        out[event.event_id] = event
    return out


@pytest.mark.parametrize("sealed", [False, True])
async def test_only_bodies_over_the_threshold_are_offloaded(
    log: EmbeddedLog, tmp_path: Path, sealed: bool
) -> None:
    claims = ClaimCheck(LocalArtifactStore(tmp_path / "objects"), THRESHOLD)
    store = EventStore(log, claims=claims, keys=TableKeyRing(log) if sealed else None)
    # 300 characters of 3-byte UTF-8: the character count fits, the bytes do not, even
    # compressed before sealing (no character repeats)
    wide = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(300))
    events = [exchange("small", "hi"), exchange("wide", wide)]
    await store.append_all(events)

    held = await stored(log)
    assert held["small"].request_ref is None and held["small"].response_ref is None
    assert held["wide"].request_ref is not None
    readable = [item.event async for item in store.read(INFERENCE)]
    assert [e.request_json for e in readable if isinstance(e, InferenceRecorded)] == [
        e.request_json for e in events
    ]
