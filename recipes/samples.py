"""Training samples as recipes see them: a joined report with its trajectory, bodies resolved.

A :class:`Sample` is built from a :class:`~reef.core.events.SampleJoined` event. Bodies that the
API claim-checked arrive as ``{"claim": "sha256:<oid>"}``; :func:`sample_from_event`
fetches them through the resolver it is given, so recipes only ever see JSON bodies.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reef.core.conversation import answer_message, request_messages
from reef.core.events import SampleJoined

#: fetches a claim-checked body (``sha256:<oid>``) as text
ClaimResolver = Callable[[str], str]

CORRECTION_KEY = "correction"


@dataclass(frozen=True, slots=True)
class Turn:
    """One recorded exchange of a trajectory."""

    receipt: str
    release_id: str
    route: str
    request: Any
    response: Any

    def messages(self) -> list[dict[str, str]]:
        """The request's conversation as ``{"role", "content"}`` text messages."""
        return [
            {"role": str(role), "content": content if isinstance(content, str) else ""}
            for role, content in request_messages(self.request)
        ]

    def answer(self) -> str | None:
        """The assistant text the response gave (either dialect), if any."""
        message = answer_message(self.response)
        if message is None or not isinstance(message[1], str):
            return None
        return message[1]


@dataclass(frozen=True, slots=True)
class Sample:
    """A scored trajectory; ``partition``/``offset`` locate it on ``reef.samples``."""

    sample_id: str
    scenario: str
    report_id: str
    score: float
    feedback: Any
    metadata: dict[str, Any]
    turns: tuple[Turn, ...]
    release_ids: tuple[str, ...]
    partition: int = 0
    offset: int = 0
    #: who reported it (the token's principal name, set by the API); None when not recorded
    reporter: str | None = None

    def correction(self) -> str | None:
        """The answer that should have been given: ``feedback.correction`` or
        ``metadata.correction`` (the strongest signal a report can carry)."""
        for source in (self.feedback, self.metadata):
            if isinstance(source, dict):
                value = source.get(CORRECTION_KEY)
                if isinstance(value, str) and value:
                    return value
        return None

    def last(self) -> Turn | None:
        return self.turns[-1] if self.turns else None


def _body(value: Any, resolve: ClaimResolver | None) -> Any:
    if isinstance(value, dict) and set(value) == {"claim"} and isinstance(value["claim"], str):
        if resolve is None:
            return None
        text = resolve(value["claim"])
        try:
            return json.loads(text)
        except ValueError:
            return text
    return value


def _json(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


def sample_from_event(
    event: SampleJoined,
    *,
    partition: int = 0,
    offset: int = 0,
    resolve: ClaimResolver | None = None,
) -> Sample:
    """The recipe's view of a joined sample (claim-checked bodies fetched via ``resolve``)."""
    turns = tuple(
        Turn(
            receipt=str(item.get("receipt", "")),
            release_id=str(item.get("release_id", "")),
            route=str(item.get("route", "")),
            request=_body(item.get("request"), resolve),
            response=_body(item.get("response"), resolve),
        )
        for item in json.loads(event.trajectory_json or "[]")
        if isinstance(item, dict)
    )
    metadata = _json(event.metadata_json)
    return Sample(
        sample_id=event.event_id,
        scenario=event.scenario,
        report_id=event.report_id,
        score=event.score,
        feedback=_json(event.feedback_json),
        metadata=metadata if isinstance(metadata, dict) else {},
        turns=turns,
        release_ids=tuple(event.release_ids),
        partition=partition,
        offset=offset,
        reporter=event.reporter,
    )
