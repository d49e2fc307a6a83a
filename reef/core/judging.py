"""Judging a completed turn: the process-reward prompt, the votes and the decision.

Pure: no clock, no I/O. The judge service (:mod:`reef.services.judge`) reads turn N's
exchange and its next state (the last message of turn N+1's request) from the sealed
bodies, builds the prompts here, asks a process-reward model ``m`` times and decides
here. The rules:

1. **Evaluative vote.** The judge's reply is scored by its *last* ``\\boxed{...}``:
   ``+1``/``1`` (the turn moved the task on: the user moved on, the tool succeeded),
   ``-1`` (a redo, a correction, a failed tool), ``0`` (ambiguous). Anything else, or no
   box, is an invalid vote.
2. **Plurality.** The decision is the value with the most valid votes; a tie at the top
   or no valid vote at all decides ``0``.
3. **Hindsight hints** (optional). A hint vote is ``\\boxed{1}`` plus a 1-3 sentence hint
   between ``[HINT_START]`` and ``[HINT_END]`` when the next state reveals what would
   have made the reply better, else ``\\boxed{-1}``. Accepted: votes of 1 whose hint is
   longer than :data:`MIN_HINT_CHARS`, de-duplicated, shortest first, at most
   ``max_hints``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from reef.core.dialogue import records, transcript

#: the first line of the evaluative judge's system prompt (stand-ins key on it)
JUDGE_MARKER = "You are a process reward model judging one turn of an AI agent."
#: the first line of the hindsight-hint system prompt
HINT_MARKER = "You are a process reward model looking for a hindsight hint."
NEXT_STATE_OPEN = "[NEXT_STATE_START]"
NEXT_STATE_CLOSE = "[NEXT_STATE_END]"
HINT_OPEN = "[HINT_START]"
HINT_CLOSE = "[HINT_END]"
MIN_HINT_CHARS = 10
VOTES = (-1, 0, 1)

_BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
_HINT = re.compile(re.escape(HINT_OPEN) + r"(.*?)" + re.escape(HINT_CLOSE), re.S)
_VOTE_TEXT = {"+1": 1, "1": 1, "-1": -1, "0": 0, "+0": 0, "-0": 0}

_EVALUATE = """{marker}
You read the agent's conversation, its reply (the turn being judged) and what came next
(the user's reply or the tool's result). Judge the reply by what came next:
+1 the task progressed (the user moved on or thanked, the tool call succeeded);
-1 the reply failed (the user corrects, repeats or rephrases, asks for a redo, the tool
   returned an error);
0 it is ambiguous.
Think briefly, then end with exactly one of \\boxed{{1}}, \\boxed{{-1}} or \\boxed{{0}}."""

_HINDSIGHT = """{marker}
You read the agent's conversation, its reply and what came next. If what came next
reveals something that would have made the reply better, answer \\boxed{{1}} and give a
1-3 sentence hint to the agent between {open} and {close}. Otherwise answer \\boxed{{-1}}."""


@dataclass(frozen=True, slots=True)
class TurnView:
    """What a judge is shown of a turn: the request, the reply, and what came next."""

    messages: tuple[tuple[str, str], ...]
    answer: str
    next_role: str
    next_text: str


@dataclass(frozen=True, slots=True)
class Decision:
    """A judgement: the votes (None for an invalid one), the score and accepted hints."""

    votes: tuple[int | None, ...]
    score: int
    hints: tuple[str, ...] = ()

    @property
    def valid_votes(self) -> list[int]:
        return [v for v in self.votes if v is not None]


# -- the votes -----------------------------------------------------------------------------


def parse_vote(reply: str) -> int | None:
    """The vote of one reply: its last ``\\boxed{}``; None when there is no valid one."""
    boxes = _BOXED.findall(reply)
    if not boxes:
        return None
    return _VOTE_TEXT.get(boxes[-1].replace(" ", ""))


def plurality(votes: Iterable[int | None]) -> int:
    """The most frequent valid vote; a tie at the top, or no valid vote, is 0."""
    counts = Counter(v for v in votes if v is not None).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return 0
    return counts[0][0]


def parse_hint(reply: str) -> str | None:
    """A hint vote's hint: voted 1 and a hint text longer than :data:`MIN_HINT_CHARS`."""
    if parse_vote(reply) != 1:
        return None
    found = _HINT.findall(reply)
    if not found:
        return None
    hint = " ".join(found[-1].split())
    return hint if len(hint) > MIN_HINT_CHARS else None


def accepted_hints(replies: Iterable[str], max_hints: int = 3) -> tuple[str, ...]:
    """Accepted hints of the hint votes: de-duplicated, shortest first, at most ``max_hints``."""
    hints = {h for h in map(parse_hint, replies) if h is not None}
    return tuple(sorted(hints, key=lambda h: (len(h), h))[:max_hints])


def decide(
    replies: Sequence[str], hint_replies: Sequence[str] = (), max_hints: int = 3
) -> Decision:
    """The decision of ``m`` evaluative replies (and the hint replies, if asked)."""
    votes = tuple(parse_vote(r) for r in replies)
    return Decision(votes, plurality(votes), accepted_hints(hint_replies, max_hints))


# -- the prompts ---------------------------------------------------------------------------


def judge_prompt(turn: TurnView) -> list[dict[str, str]]:
    """The evaluative prompt (chat messages) for one turn."""
    return [
        {"role": "system", "content": _EVALUATE.format(marker=JUDGE_MARKER)},
        {"role": "user", "content": _render(turn)},
    ]


def hint_prompt(turn: TurnView) -> list[dict[str, str]]:
    """The hindsight-hint prompt (chat messages) for one turn."""
    system = _HINDSIGHT.format(marker=HINT_MARKER, open=HINT_OPEN, close=HINT_CLOSE)
    return [{"role": "system", "content": system}, {"role": "user", "content": _render(turn)}]


def _render(turn: TurnView) -> str:
    history = "\n\n".join(f"[{role}]\n{text}" for role, text in turn.messages)
    return (
        f"## The conversation\n{history}\n\n"
        f"## The agent's reply (judged)\n{turn.answer}\n\n"
        f"## What came next ({turn.next_role})\n"
        f"{NEXT_STATE_OPEN}\n{turn.next_text}\n{NEXT_STATE_CLOSE}"
    )


# -- reading a turn from its bodies ----------------------------------------------------------


def turn_view(
    request: Any, response: Any, next_request: Any, route: str | None = None
) -> TurnView | None:
    """The judge's view from turn N's request and response and turn N+1's request
    (decoded JSON bodies, any dialect, streams as Reef recorded them); None when a part
    is missing. Tool calls and tool results are shown as text
    (:mod:`reef.core.dialogue.transcript`)."""
    messages = conversation(request, route)
    answer = answer_text(response, route)
    following = conversation(next_request, route)
    if answer is None or not following:
        return None
    role, text = following[-1]
    return TurnView(tuple(messages), answer, role, text)


def conversation(request: Any, route: str | None = None) -> list[tuple[str, str]]:
    """A request's messages as (role, text); tool results read as role ``tool``."""
    found = records.conversation_of(request, route)
    return [] if found is None else transcript.entries(found.flat())


def answer_text(response: Any, route: str | None = None) -> str | None:
    """The reply of a response (buffered, or an assembled stream), tool calls included."""
    answer = records.answer_of(response, route)
    if not answer:
        return None
    return "\n".join(text for _, text in transcript.entries(answer))
