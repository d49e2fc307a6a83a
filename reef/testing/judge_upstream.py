"""A scripted stand-in for a process-reward judge (no model: fixed rules), on loopback.

The scripted upstream of :mod:`reef.testing.scripted_upstream` (same routes, request
history at ``/_stub/requests``, ``ready <url>`` line), whose chat completions answer the
judge's prompts (:mod:`reef.core.judging`) by the next state they show::

    python -m reef.testing.judge_upstream --port 0

**Evaluative prompt** (system prompt starts with :data:`~reef.core.judging.JUDGE_MARKER`):
``\\boxed{1}`` when the next state contains "thanks", ``\\boxed{-1}`` when it contains
"no,", else ``\\boxed{0}``; a next state containing ``__judge_split__`` gets the votes
1, -1, 0 in turn (a tie: decided 0).

**Hint prompt** (:data:`~reef.core.judging.HINT_MARKER`): a next state with "no," gets
``\\boxed{1}`` and the hint "The user said: <next state>" between the hint markers; any
other gets ``\\boxed{-1}``.

**Faults**, by markers in the next state: ``__judge_fails__`` answers HTTP 500;
``__judge_hangs__`` holds the *first* request that shows it open for an hour (the
judge is killed meanwhile), later ones are answered as usual.

**SGLang's native ``POST /generate``** answers the same prompts rendered as text (the
markers are found anywhere in ``text``) by the same rules and faults, in SGLang's shape
(``text``, ``output_ids``, ``meta_info``); any other ``/generate`` text gets HTTP 400.

Every other request (an agent's) is answered as by the scripted upstream, so one
process can be both a deployment's upstream and its judge.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import orjson

from reef.core.judging import (
    HINT_CLOSE,
    HINT_MARKER,
    HINT_OPEN,
    JUDGE_MARKER,
    NEXT_STATE_CLOSE,
    NEXT_STATE_OPEN,
)
from reef.testing.scripted_upstream import (
    ROUTES,
    Exchange,
    Receive,
    Route,
    Scope,
    Script,
    ScriptedUpstream,
    Send,
    openai_error,
    read_body,
    run_stand_in,
    send_json,
)

_CHAT = ROUTES["/v1/chat/completions"]
HANG_S = 3600.0


def system_text(messages: Any) -> str:
    """The first message's text when it is a system message (the judge's markers)."""
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        first = messages[0]
        if first.get("role") == "system" and isinstance(first.get("content"), str):
            return str(first["content"])
    return ""


def next_state(messages: Any) -> str:
    """The next state a judge prompt shows (between the markers), or ''."""
    contents = messages if isinstance(messages, list) else []
    text = "\n".join(str(m.get("content", "")) for m in contents if isinstance(m, dict))
    start, end = text.rfind(NEXT_STATE_OPEN), text.rfind(NEXT_STATE_CLOSE)
    return text[start + len(NEXT_STATE_OPEN) : end].strip() if 0 <= start < end else ""


def evaluative_answer(state: str, n: int) -> str:
    if "__judge_split__" in state:
        return f"Hard to say. \\boxed{{{(1, -1, 0)[n % 3]}}}"
    if "thanks" in state.lower():
        return "The user moved on. \\boxed{1}"
    if "no," in state.lower():
        return "The user corrects the reply. \\boxed{-1}"
    return "Ambiguous. \\boxed{0}"


def hint_answer(state: str) -> str:
    if "no," in state.lower():
        return f"\\boxed{{1}} {HINT_OPEN}The user said: {state}{HINT_CLOSE}"
    return "Nothing to learn. \\boxed{-1}"


class JudgeUpstream(ScriptedUpstream):
    """Judge prompts answered by the rules above; the rest as the scripted upstream."""

    def __init__(self) -> None:
        super().__init__()
        self._hung: set[str] = set()
        self._votes = itertools.count()

    async def _answer(self, route: Route, raw: bytes, send: Send) -> None:
        body = orjson.loads(raw) if raw.startswith(b"{") else None
        system = system_text(body.get("messages")) if isinstance(body, dict) else ""
        if (
            route is not _CHAT
            or not isinstance(body, dict)
            or not system.startswith((JUDGE_MARKER, HINT_MARKER))
        ):
            await super()._answer(route, raw, send)
            return
        state = next_state(body.get("messages"))
        if "__judge_hangs__" in state and state not in self._hung:
            self._hung.add(state)
            await asyncio.sleep(HANG_S)
        if "__judge_fails__" in state:
            await send_json(send, 500, openai_error(500, "scripted judge failure"))
            return
        if system.startswith(JUDGE_MARKER):
            answer = evaluative_answer(state, next(self._votes))
        else:
            answer = hint_answer(state)
        exchange = Exchange(next(self._numbers), body, Script(f"Return exactly: {answer}"))
        await send_json(send, 200, _CHAT.buffered(exchange))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (scope["method"], scope["path"]) == ("POST", GENERATE):
            raw = await read_body(receive)
            entry = ("POST", GENERATE, scope.get("query_string", b""), scope["headers"], raw)
            self.recent.append(entry)
            await self._generate(raw, send)
        else:
            await super().__call__(scope, receive, send)

    async def _generate(self, raw: bytes, send: Send) -> None:
        """SGLang's ``/generate``: a judge prompt as text, answered by the same rules."""
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str) or not (JUDGE_MARKER in text or HINT_MARKER in text):
            await send_json(send, 400, {"error": {"message": "not a judge prompt (text)"}})
            return
        state = text_next_state(text)
        if "__judge_hangs__" in state and state not in self._hung:
            self._hung.add(state)
            await asyncio.sleep(HANG_S)
        if "__judge_fails__" in state:
            await send_json(send, 500, {"error": {"message": "scripted judge failure"}})
            return
        if HINT_MARKER in text:
            answer = hint_answer(state)
        else:
            answer = evaluative_answer(state, next(self._votes))
        await send_json(send, 200, generate_reply(answer, text, next(self._numbers)))


# -- SGLang's native /generate -------------------------------------------------------------

GENERATE = "/generate"


def text_next_state(text: str) -> str:
    """The next state a judge prompt rendered as text shows (between the markers), or ''."""
    start, end = text.rfind(NEXT_STATE_OPEN), text.rfind(NEXT_STATE_CLOSE)
    return text[start + len(NEXT_STATE_OPEN) : end].strip() if 0 <= start < end else ""


def generate_reply(answer: str, prompt: str, number: int) -> dict[str, Any]:
    """SGLang's non-streaming ``/generate`` body (token counts by whitespace)."""
    words = len(answer.split())
    meta = {
        "id": f"stub-{number}",
        "finish_reason": {"type": "stop", "matched": None},
        "prompt_tokens": len(prompt.split()),
        "completion_tokens": words,
        "cached_tokens": 0,
        "weight_version": "default",
        "e2e_latency": 0.0,
    }
    return {"text": answer, "output_ids": list(range(words)), "meta_info": meta}


def main(argv: list[str] | None = None) -> None:
    # a held request does not hold the shutdown
    run_stand_in(JudgeUpstream(), argv, __doc__.splitlines()[0], timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
