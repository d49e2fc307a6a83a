"""The pure join processor in tests: a time axis, a fresh processor, one output, the ids of
a report's fates and a state snapshot."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from reef.core.events import Event, ReportSubmitted
from reef.core.ids import derived_id
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


def fate_ids(event: ReportSubmitted) -> tuple[str, str]:
    """(SampleJoined id, ReportRejected id) this report content would get."""
    parts = (event.scenario, event.event_id, event.content_hash)
    return derived_id("sample", *parts), derived_id("rejected", *parts)


def snapshot(state: DictState) -> str:
    """The state as canonical JSON, to compare before and after."""
    return json.dumps(state.data, sort_keys=True)
