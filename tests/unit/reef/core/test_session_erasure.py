"""Which exchanges erasing a session erases (reef.core.erasure): by tag, by session
tracking's id, and each served exchange's shadow copies after it."""

from __future__ import annotations

from dataclasses import replace

from reef.core.erasure import session_receipts, tracked_receipts
from reef.core.events import InferenceRecorded, SessionExpired, TurnCompleted, utc_now
from reef_dev.events import inference

AT = utc_now()


def exchange(
    receipt: str, session: str | None = None, shadow_of: str | None = None
) -> InferenceRecorded:
    tags = {"session": session} if session else {}
    return replace(inference("s", receipt, AT), tags=tags, shadow_of=shadow_of)


def completed(session: str, receipt: str, following: str) -> TurnCompleted:
    return TurnCompleted(
        event_id=f"turn-{receipt}",
        scenario="s",
        occurred_at=AT,
        producer="test",
        session_id=session,
        turn_index=0,
        receipt_id=receipt,
        next_receipt_id=following,
        release_id="rel-a",
        matched_by="transcript",
    )


def expired(session: str, last: str) -> SessionExpired:
    return SessionExpired(
        event_id=f"expired-{session}",
        scenario="s",
        occurred_at=AT,
        producer="test",
        session_id=session,
        last_receipt_id=last,
        turns=2,
        reason="idle",
    )


def test_a_tagged_session_is_its_tagged_exchanges_with_their_shadow_copies() -> None:
    exchanges = [
        exchange("a1", "a"),
        exchange("b1", "b"),
        exchange("a2", "a"),
        exchange("copy-a1", "a", shadow_of="a1"),
        exchange("copy-b1", shadow_of="b1"),
    ]
    assert session_receipts("a", exchanges, set()) == ["a1", "copy-a1", "a2"]
    assert session_receipts("c", exchanges, set()) == []


def test_a_tracked_session_is_what_session_tracking_bound_into_it() -> None:
    turns = [completed("r1", "r1", "r2"), completed("r1", "r2", "r3"), expired("r1", "r4")]
    turns.append(completed("x1", "x1", "x2"))
    tracked = tracked_receipts("r1", turns)
    assert tracked == {"r1", "r2", "r3", "r4"}
    exchanges = [exchange(r) for r in ("r1", "x1", "r2", "r3", "x2", "r4")]
    assert session_receipts("r1", exchanges, tracked) == ["r1", "r2", "r3", "r4"]


def test_an_id_no_session_tracking_knows_names_nothing() -> None:
    assert tracked_receipts("r9", [completed("r1", "r1", "r2")]) == set()
    assert session_receipts("r9", [exchange("r9")], set()) == []
