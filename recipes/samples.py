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

from recipes.errors import RecipeError
from reef.core.dialogue import records, transcript
from reef.core.dialogue.chat_template import template_messages, template_tools
from reef.core.dialogue.model import Conversation, Message
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

    def conversation(self) -> Conversation | None:
        """What the request showed the model, whole (tools, system, tool calls and
        results), in any dialect; None when the request carries no conversation."""
        return records.conversation_of(self.request, self.route or None)

    def answer_messages(self) -> tuple[Message, ...]:
        """What the model answered: text, tool calls, reasoning (streams included)."""
        return records.answer_of(self.response, self.route or None)

    def messages(self) -> list[dict[str, Any]]:
        """The request's conversation as chat-template messages: ``role`` and
        ``content`` text, plus ``tool_calls`` on an assistant turn that called tools
        and ``tool_call_id`` on each tool result (the shape Hugging Face chat
        templates and OpenAI chat completions read)."""
        conversation = self.conversation()
        return [] if conversation is None else template_messages(conversation.flat())

    def tools(self) -> list[dict[str, Any]]:
        """The tools the request offered, as chat-template tool schemas."""
        conversation = self.conversation()
        return [] if conversation is None else template_tools(conversation.tools)

    def transcript(self) -> list[tuple[str, str]]:
        """The request's conversation as readable ``(role, text)`` entries, tool calls
        and tool results written out (what a proposer or a judge reads)."""
        conversation = self.conversation()
        return [] if conversation is None else transcript.entries(conversation.flat())

    def answer_transcript(self) -> str | None:
        """The answer as readable text, tool calls written out (None: no answer)."""
        answer = self.answer_messages()
        if not answer:
            return None
        return "\n".join(text for _, text in transcript.entries(answer))

    def answer(self) -> str | None:
        """The assistant text the response gave (any dialect), if any."""
        answer = self.answer_messages()
        texts = [m.text() for m in answer if m.role == "assistant"]
        if not answer or not any(m.parts for m in answer):
            return None
        return "".join(texts)


@dataclass(frozen=True, slots=True)
class Sample:
    """A judged trajectory; ``partition``/``offset`` locate it on ``reef.samples``."""

    sample_id: str
    scenario: str
    report_id: str
    #: None: the report gave feedback without a score (recipes that need one skip it)
    score: float | None
    feedback: Any
    metadata: dict[str, Any]
    turns: tuple[Turn, ...]
    release_ids: tuple[str, ...]
    partition: int = 0
    offset: int = 0
    #: who reported it (the token's principal name, set by the API); None when not recorded
    reporter: str | None = None

    def scored(self) -> float:
        """The score, for a recipe that admitted this sample only with one
        (:attr:`recipes.base.Recipe.needs_score`)."""
        if self.score is None:
            raise RecipeError(f"sample {self.sample_id} has no score")
        return self.score

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
