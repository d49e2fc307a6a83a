"""Judged turns in tests: sealed-ready exchanges of one-turn sessions and their
``TurnCompleted``, as the API and the session processor write them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

from reef.artifacts import ClaimCheck, LocalArtifactStore
from reef.core.events import Event, InferenceRecorded, TurnCompleted, TurnJudged
from reef.core.ids import derived_id
from reef.core.topics import LOG_TOPICS
from reef.crypto.rings import open_keyring
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef.settings import Settings
from reef_dev.events import chat_request, chat_response, inference, receipt

DEFAULTS = Settings()


def session(
    scenario: str, n: int, next_text: str, at: datetime
) -> tuple[list[Event], TurnCompleted]:
    """Turn ``n``'s two exchanges (its own, and the next one ending with ``next_text``)
    and the ``TurnCompleted`` binding them."""
    first, second = receipt(scenario, 2 * n), receipt(scenario, 2 * n + 1)
    asked = [{"role": "user", "content": f"question {n}"}]
    said = {"role": "assistant", "content": f"answer {n}"}
    exchanges: list[Event] = [
        inference(
            scenario,
            first,
            at,
            request=chat_request(asked),
            response=chat_response(said["content"]),
        ),
        inference(
            scenario,
            second,
            at,
            request=chat_request([*asked, said, {"role": "user", "content": next_text}]),
        ),
    ]
    turn = TurnCompleted(
        event_id=derived_id("turn", first, second),
        scenario=scenario,
        occurred_at=at,
        producer="test",
        session_id=first,
        turn_index=0,
        receipt_id=first,
        next_receipt_id=second,
        release_id="rel-a",
        matched_by="transcript",
        next_state_role="user",
    )
    return exchanges, turn


def judgements(events: list[Event]) -> list[TurnJudged]:
    return [e for e in events if isinstance(e, TurnJudged)]


def exchanges_of(events: list[Event]) -> list[InferenceRecorded]:
    return [e for e in events if isinstance(e, InferenceRecorded)]


@contextlib.asynccontextmanager
async def judged_store(work: Path) -> AsyncIterator[EventStore]:
    """A real embedded log with every topic, its key ring and an artifact store, bodies
    stored in the default format, as the judge reads them."""
    log = EmbeddedLog(work / "log.sqlite3", partitions=2)
    await log.start()
    await log.ensure_topics(list(LOG_TOPICS))
    ring = open_keyring(log)
    await ring.start()
    try:
        claims = ClaimCheck(
            LocalArtifactStore(work / "objects"), DEFAULTS.artifacts.claim_check_bytes
        )
        yield EventStore(log, claims=claims, keys=ring, body_format=DEFAULTS.artifacts.body_format)
    finally:
        await ring.close()
        await log.close()
