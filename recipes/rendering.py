"""What a weight recipe trains on: a trajectory rendered by the model's own chat template,
with the trained spans marked.

A :class:`Trajectory` is chat-template messages (``role``, ``content``, ``tool_calls``,
``tool_call_id``: :func:`reef.core.dialogue.chat_template.template_messages`), the tools
offered, and which assistant messages carry the loss. :func:`render` asks the
tokenizer's template for the whole text (``apply_chat_template(messages, tools=...)``)
and, for each trained assistant message, for the text up to it with the generation
prompt: what the template adds between the two is that message as the model writes it
(its text and its tool calls in the family's syntax, and the end-of-turn token), and
that span is trained. Everything else (system prompt, tools, user text, tool results,
untrained assistant turns) is context: in the input, never in the loss.

**Context longer than the window** (``max_length`` tokens): the system messages and
the tools are kept, and the oldest turns go first (a turn: a user message and
everything up to the next one), while a trained message remains; if the most recent
turn alone does not fit, its oldest tokens are cut. Both cuts are counted
(:attr:`Rendered.cut_messages`, :attr:`Rendered.cut_tokens`).

Templates that render a message differently once a later one follows (some drop
earlier reasoning) still give exact spans: each span is taken from the template's
rendering of the conversation up to that message, and the whole text is the
concatenation of those pieces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

IGNORE = -100

#: which assistant messages of a trajectory train: the answer the feedback is about
#: (``last``: the messages of the reported exchange's answer) or every one
TrainedTurns = Literal["last", "all"]


class ChatTokenizer(Protocol):
    """What rendering needs of a Hugging Face tokenizer."""

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def __call__(self, text: str, **kwargs: Any) -> Any: ...

    def decode(self, ids: list[int], **kwargs: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class Trajectory:
    """Chat-template messages, the tools offered, and the indices of the assistant
    messages whose tokens carry the loss."""

    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...] = ()
    trained: tuple[int, ...] = ()

    @classmethod
    def of(
        cls,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        answer_from: int,
        turns: TrainedTurns = "last",
        reported: Sequence[int] = (),
    ) -> Trajectory:
        """``messages[answer_from:]`` is the answer the feedback is about, and so are the
        earlier assistant messages at ``reported`` (the answers of the other exchanges
        the report quoted, as the conversation repeats them)."""
        first = 0 if turns == "all" else answer_from
        trained = tuple(
            i
            for i, m in enumerate(messages)
            if m.get("role") == "assistant" and (i >= first or i in reported)
        )
        return cls(tuple(messages), tuple(tools), trained)


@dataclass(frozen=True, slots=True)
class Segment:
    text: str
    trained: bool
    tokens: int


@dataclass(frozen=True, slots=True)
class Rendered:
    """Input ids and labels, and the text they are (``segments``: what remains after
    the context rule, each marked trained or not)."""

    ids: list[int]
    labels: list[int]
    segments: list[Segment] = field(default_factory=list)
    cut_messages: int = 0
    cut_tokens: int = 0

    @property
    def trained_tokens(self) -> int:
        return sum(1 for label in self.labels if label != IGNORE)


def render(tokenizer: ChatTokenizer, trajectory: Trajectory, max_length: int) -> Rendered:
    """The trajectory as input ids and labels (``IGNORE`` outside trained spans)."""
    messages = list(trajectory.messages)
    trained = set(trajectory.trained)
    cut = 0
    while True:
        rendered = _render(tokenizer, messages, trajectory.tools, trained)
        total = sum(s.tokens for s in rendered)
        droppable = _oldest_turn(messages, trained)
        if total <= max_length or droppable is None:
            break
        start, end = droppable
        messages = messages[:start] + messages[end:]
        trained = {i - (end - start) if i >= end else i for i in trained}
        cut += end - start
    pieces = [(segment, _ids(tokenizer, segment.text)) for segment in rendered]
    over = max(0, sum(len(p) for _, p in pieces) - max_length)
    ids: list[int] = []
    labels: list[int] = []
    kept: list[Segment] = []
    skip = over
    for segment, piece in pieces:  # the oldest tokens beyond the window are cut
        if skip >= len(piece):
            skip -= len(piece)
            continue
        if skip:
            piece, skip = piece[skip:], 0
            segment = Segment(str(tokenizer.decode(piece)), segment.trained, len(piece))
        kept.append(segment)
        ids.extend(piece)
        labels.extend(piece if segment.trained else [IGNORE] * len(piece))
    return Rendered(ids, labels, kept, cut_messages=cut, cut_tokens=over)


def _render(
    tokenizer: ChatTokenizer,
    messages: list[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    trained: set[int],
) -> list[Segment]:
    segments: list[Segment] = []
    done = ""
    for index in sorted(trained):
        before = _template(tokenizer, messages[:index], tools, generation=True)
        upto = _template(tokenizer, messages[: index + 1], tools, generation=False)
        if not before.startswith(done) or not upto.startswith(before):
            raise ValueError(
                "the chat template does not render this conversation as a growing text; "
                "its assistant turns cannot be told apart from their context"
            )
        segments.append(_segment(tokenizer, before[len(done) :], trained=False))
        segments.append(_segment(tokenizer, upto[len(before) :], trained=True))
        done = upto
    whole = _template(tokenizer, messages, tools, generation=False)
    rest = whole[len(done) :] if whole.startswith(done) else ""
    segments.append(_segment(tokenizer, rest, trained=False))
    return [s for s in segments if s.text]


def _segment(tokenizer: ChatTokenizer, text: str, *, trained: bool) -> Segment:
    return Segment(text, trained, len(_ids(tokenizer, text)) if text else 0)


def _template(
    tokenizer: ChatTokenizer,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    *,
    generation: bool,
) -> str:
    options: dict[str, Any] = {"tokenize": False, "add_generation_prompt": generation}
    if tools:
        options["tools"] = [dict(t) for t in tools]
    text = tokenizer.apply_chat_template([dict(m) for m in messages], **options)
    return str(text)


def _ids(tokenizer: ChatTokenizer, text: str) -> list[int]:
    encoded = tokenizer(text, add_special_tokens=False)
    ids = encoded["input_ids"] if isinstance(encoded, Mapping) else encoded.input_ids
    return [int(i) for i in ids]


def _oldest_turn(messages: list[Mapping[str, Any]], trained: set[int]) -> tuple[int, int] | None:
    """The oldest whole turn before the first trained message, after the system head."""
    start = 0
    while start < len(messages) and messages[start].get("role") in ("system", "developer"):
        start += 1
    limit = min(trained) if trained else len(messages)
    end = start + 1
    while end < limit and messages[end].get("role") != "user":
        end += 1
    if start >= limit or end >= limit:  # the turn that asks for the trained answer stays
        return None
    return start, end
