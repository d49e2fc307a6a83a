"""A scripted upstream whose answers depend on the system prompt (the harness agent world).

The scripted stand-in of :mod:`reef.testing.scripted_upstream` (same routes, request
history at ``/_stub/requests``, ``ready <url>`` line), with chat completions answered
as a tiny agent world::

    python -m reef.testing.harness_upstream --port 0

Shared by the ``harness_evolve`` tests, the tutorial (``tutorials/harness_evolve``) and
the benchmarks.

**Agent.** A last user message ``Task: <word>`` is answered with the word reversed if
the system prompt contains :data:`RULE`, else with the word itself (what an agent
without the rule would do). Graders expect the reversed word, so tasks pass only under
a harness that carries the rule.

**Proposer.** A request whose system prompt starts with the harness proposer's marker
(:data:`recipes.harness_evolve.PROPOSER_MARKER`) is answered with one JSON edit:

* ``__propose_useless__`` anywhere in the request: append a rule that does not help
  (``rules/style.md``: "Keep answers short.");
* ``__propose_malformed__``: prose instead of JSON (the candidate must fail closed);
* else, if the request shows a failing ``Task:`` trajectory: append :data:`RULE` to
  ``system_prompt.md`` (the fix); otherwise prose (nothing to fix).

**Reflector** (``gepa``). A request whose system prompt starts with
:data:`recipes.gepa.reflection.REFLECTION_MARKER` is answered with the rewritten file
(the first fenced block of the request) in a fenced block:

* ``__propose_useless__`` anywhere: the file without :data:`RULE`, plus "Keep answers
  short." (a rewrite that does not help, or harms);
* ``__propose_malformed__``: an empty block (the step must fail closed);
* else, if an example scored below 1 and the file lacks :data:`RULE`: the file with
  :data:`RULE` appended; otherwise the file unchanged.

Every other request is answered as by the scripted upstream. :class:`StandInChat` gives
the same answers in-process, as a :class:`recipes.chat.ChatClient`.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from recipes.chat import ChatEndpoint
from recipes.gepa.reflection import REFLECTION_MARKER
from recipes.harness_evolve import PROPOSER_MARKER
from reef.testing.scripted_upstream import (
    ROUTES,
    Route,
    Script,
    ScriptedUpstream,
    last_user_text,
    run_stand_in,
)

RULE: Final = "Answer with the word reversed."
USELESS: Final = "__propose_useless__"
MALFORMED: Final = "__propose_malformed__"
FIX_EDIT: Final = {
    "op": "append",
    "path": "system_prompt.md",
    "text": RULE,
    "rationale": "the agent repeats the word; the expected answers are reversed",
}
USELESS_EDIT: Final = {
    "op": "append",
    "path": "rules/style.md",
    "text": "Keep answers short.",
    "rationale": "shorter answers",
}
_TASK = re.compile(r"Task:\s*(\S+)")
_FILE = re.compile(r"```[^\n`]*\n(.*?)```", re.S)
_SCORE = re.compile(r"### Score\n([0-9.eE+-]+)")
STYLE: Final = "Keep answers short."
_CHAT: Final = ROUTES["/v1/chat/completions"]


def system_text(messages: Any) -> str:
    """Every system message's text, joined."""
    if not isinstance(messages, list):
        return ""
    return "\n".join(
        str(m.get("content", ""))
        for m in messages
        if isinstance(m, dict) and m.get("role") == "system" and isinstance(m.get("content"), str)
    )


def agent_answer(system: str, user: str) -> str:
    task = _TASK.search(user)
    if task is None:
        return f"ok: {' '.join(user.split())}"
    word = task.group(1)
    return word[::-1] if RULE.lower() in system.lower() else word


def proposer_answer(request_text: str) -> str:
    if MALFORMED in request_text:
        return "I would add a rule telling the agent to reverse the word."
    if USELESS in request_text:
        return orjson.dumps(USELESS_EDIT).decode()
    if "] Task:" in request_text:
        return orjson.dumps(FIX_EDIT).decode()
    return "There is nothing to fix."


def reflector_answer(request: str) -> str:
    found = _FILE.search(request)
    current = found.group(1).strip() if found else ""
    if MALFORMED in request:
        return "```\n```"
    if USELESS in request:
        kept = "\n".join(line for line in current.splitlines() if line.strip() != RULE)
        return f"```\n{kept}\n{STYLE}\n```"
    failing = any(float(score) < 1.0 for score in _SCORE.findall(request))
    if failing and RULE not in current:
        return f"```\n{current}\n{RULE}\n```"
    return f"```\n{current}\n```"


def answer_for(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    system = system_text(messages)
    if system.startswith(PROPOSER_MARKER):
        return proposer_answer(orjson.dumps(messages).decode())
    if system.startswith(REFLECTION_MARKER):
        return reflector_answer(last_user_text(messages))
    return agent_answer(system, last_user_text(messages))


class StandInChat:
    """The stand-in's answers without a server (a :class:`recipes.chat.ChatClient`);
    ``requests`` keeps every conversation asked, in order."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, str]]] = []

    def complete(
        self, endpoint: ChatEndpoint, messages: list[dict[str, str]], *, max_tokens: int
    ) -> str:
        self.requests.append(messages)
        return answer_for({"messages": messages})


class HarnessUpstream(ScriptedUpstream):
    """Chat completions answered by :func:`answer_for`; the rest as the scripted upstream."""

    def script(self, route: Route, body: dict[str, Any]) -> Script:
        if route is not _CHAT:
            return super().script(route, body)
        # the scripted upstream answers X to "Return exactly: X": the answer chosen here
        return Script(f"Return exactly: {answer_for(body)}")


def main(argv: list[str] | None = None) -> None:
    run_stand_in(HarnessUpstream(), argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
