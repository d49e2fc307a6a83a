"""Which exchanges erasing a session erases (pure: events in, receipts out).

A session is named by its tag (``x-reef-tag-session``, or an agent's own session header
recorded as that tag) or, when sessions are tracked, by its id on ``reef.turns`` (the
receipt of its first turn: :mod:`reef.core.sessions`). Its exchanges are those tagged
with it and those session tracking bound into it (``TurnCompleted``'s two receipts,
``SessionExpired``'s last one); a served exchange's shadow copies (``shadow_of``) follow
it. Erasing them all also erases every block they introduced, wherever a later record
repeats it (:mod:`reef.services.bodystore`).
"""

from __future__ import annotations

from collections.abc import Iterable

from reef.core.events import Event, InferenceRecorded, SessionExpired, TurnCompleted


def tracked_receipts(session: str, turns: Iterable[Event]) -> set[str]:
    """The receipts session tracking bound into ``session`` (empty: it tracked none)."""
    found: set[str] = set()
    for event in turns:
        if isinstance(event, TurnCompleted) and event.session_id == session:
            found |= {event.receipt_id, event.next_receipt_id}
        elif isinstance(event, SessionExpired) and event.session_id == session:
            found.add(event.last_receipt_id)
    if found:
        found.add(session)  # its id is the receipt of its first turn
    return found


def session_receipts(
    session: str, exchanges: Iterable[InferenceRecorded], tracked: set[str]
) -> list[str]:
    """The session's exchanges in log order, each served one's shadow copies after it."""
    members: list[str] = []
    shadows: dict[str, list[str]] = {}
    for e in exchanges:
        if e.shadow_of is not None:
            shadows.setdefault(e.shadow_of, []).append(e.event_id)
        elif e.tags.get("session") == session or e.event_id in tracked:
            members.append(e.event_id)
    return [r for receipt in members for r in (receipt, *shadows.get(receipt, []))]
