"""The pure join processor in example tests: a time axis, a fresh processor, one output."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from reef.core.events import Event
from reef.core.join import JoinProcessor, JoinSettings
from reef.core.state import DictState

#: the time axis' origin
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def fresh(**kwargs: Any) -> tuple[JoinProcessor, DictState]:
    return JoinProcessor(JoinSettings(**kwargs)), DictState()


def only(events: list[Event]) -> Event:
    assert len(events) == 1, events
    return events[0]
