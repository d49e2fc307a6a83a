"""The pure session processor in tests: exchanges as the API records them (fingerprints
included, bodies left out: the processor never reads them), a fresh processor; and
:class:`SessionLoad`, agents whose sessions go through a running API (their structure
known, so the turns they must yield are too)."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from reef.core import fingerprints
from reef.core.events import InferenceRecorded
from reef.core.ids import derived_id
from reef.core.sessions import SessionProcessor, SessionSettings
from reef.core.state import DictState

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
KEY = fingerprints.scenario_key(b"test-secret", "demo")
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {}}}]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def fresh(**kwargs: Any) -> tuple[SessionProcessor, DictState]:
    return SessionProcessor(SessionSettings(**kwargs)), DictState()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def tool(text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": "c1", "content": text}


def exchange(
    rec: str,
    seconds: float,
    messages: list[dict[str, Any]],
    answer: str,
    *,
    scenario: str = "demo",
    tags: dict[str, str] | None = None,
    tools: bool = True,
    complete: bool = True,
    release: str = "rel-a",
) -> InferenceRecorded:
    """An exchange with receipt ``rec``: ``messages`` asked, ``answer`` given."""
    request: dict[str, Any] = {"model": "m", "messages": messages}
    if tools:
        request["tools"] = TOOLS
    response = {"choices": [{"message": assistant(answer)}]}
    return InferenceRecorded(
        event_id=rec,
        scenario=scenario,
        occurred_at=at(seconds),
        producer="test",
        dialect="openai",
        route="/v1/chat/completions",
        release_id=release,
        stream=False,
        status=200,
        complete=complete,
        latency_ms=1.0,
        upstream_latency_ms=1.0,
        tags=tags or {},
        sealed=True,
        message_fingerprints=fingerprints.request_fingerprints(KEY, request),
        answer_fingerprint=fingerprints.answer_fingerprint(KEY, response),
        has_tools=fingerprints.has_tools(request),
    )


# ---------------------------------------------------------------------------
# Agents through the HTTP API (the sessions kill test): known session structure


@dataclass
class AgentSession:
    """One agent conversation as the client sent it: the receipts of its turns in order,
    and of the requests that must bind nothing (identical resends, side calls)."""

    scenario: str
    tag: str | None
    turns: list[str] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)
    sides: list[str] = field(default_factory=list)

    def expected_turns(self) -> set[str]:
        """The ``TurnCompleted`` ids its turns must yield, once each (none expires
        between two of its turns: the load's turns are seconds apart, the TTL longer)."""
        pairs = zip(self.turns, self.turns[1:], strict=False)
        return {derived_id("turn-completed", self.scenario, a, b) for a, b in pairs}


NEXT_STATES = ("no, try again", "thanks, next one", "__tool__")


class SessionLoad:
    """``agents`` concurrent agents, each running multi-turn sessions back to back
    through the API (OpenAI chat, tool schemas offered): half of the sessions tagged
    (``x-reef-tag-session``), half untagged (transcript resends); some turns resent
    identically (a client retry) or followed by a side call. In a thread; a context
    manager. Every acknowledged request's receipt is kept in ``sessions``."""

    def __init__(
        self, base_url: str, token: str, scenarios: list[str], *, agents: int = 4, seed: int = 0
    ) -> None:
        self.base_url, self.token, self.scenarios = base_url, token, scenarios
        self.agents, self.seed = agents, seed
        self.sessions: list[AgentSession] = []
        self.errors: Counter[str] = Counter()
        self.acknowledged = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="session-load", daemon=True)

    def __enter__(self) -> SessionLoad:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the session load did not stop in 60 s"

    def wait_acks(self, count: int, timeout: float = 60.0) -> None:
        """Until ``count`` more requests were acknowledged (the API keeps serving)."""
        target, deadline = self.acknowledged + count, time.monotonic() + timeout
        while self.acknowledged < target:
            assert self._thread.is_alive(), "the session load stopped"
            assert time.monotonic() < deadline, (
                f"{count} acknowledgements not in {timeout:.0f} s (errors {dict(self.errors)})"
            )
            time.sleep(0.05)

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=60) as c:
            await asyncio.gather(*(self._agent(c, n) for n in range(self.agents)))

    async def _agent(self, client: httpx.AsyncClient, n: int) -> None:
        rng = random.Random(self.seed * 1000 + n)
        while not self._stop.is_set():
            tag = f"agent-{uuid.uuid4().hex[:12]}" if rng.random() < 0.5 else None
            session = AgentSession(rng.choice(self.scenarios), tag)
            self.sessions.append(session)
            if not await self._session(client, session, rng):
                return  # a failed request: the error is counted, the agent stops

    async def _session(
        self, client: httpx.AsyncClient, session: AgentSession, rng: random.Random
    ) -> bool:
        messages = [user(f"task {uuid.uuid4().hex}: what is {rng.randint(1, 99)}+1?")]
        for left in range(rng.randint(2, 4), 0, -1):
            said = await self._post(client, session, messages, session.turns)
            if said is None:
                return False
            if (
                rng.random() < 0.2
                and await self._post(client, session, messages, session.retries) is None
            ):
                return False
            if rng.random() < 0.2 and not await self._side(client, session, messages):
                return False
            if left == 1 or self._stop.is_set():
                return True
            messages = [*messages, said, _next_state(rng.choice(NEXT_STATES))]
            await asyncio.sleep(rng.uniform(0.02, 0.1))
        return True

    async def _side(
        self, client: httpx.AsyncClient, session: AgentSession, messages: list[dict[str, Any]]
    ) -> bool:
        """A title request: untagged, no tool schemas; tagged, ``turn-type: side``."""
        asked = [*messages, user("a title for this chat?")]
        tools = session.tag is not None
        found = await self._post(client, session, asked, session.sides, tools=tools, side=True)
        return found is not None

    async def _post(
        self,
        client: httpx.AsyncClient,
        session: AgentSession,
        messages: list[dict[str, Any]],
        into: list[str],
        *,
        tools: bool = True,
        side: bool = False,
    ) -> dict[str, Any] | None:
        """The assistant message answered (its receipt appended to ``into``)."""
        body: dict[str, Any] = {"model": "m", "messages": messages}
        if tools:
            body["tools"] = TOOLS
        headers = {"x-reef-scenario": session.scenario}
        if session.tag is not None:
            headers["x-reef-tag-session"] = session.tag
            if side:
                headers["x-reef-tag-turn-type"] = "side"
        try:
            response = await client.post("/v1/chat/completions", json=body, headers=headers)
        except httpx.HTTPError as exc:
            self.errors[type(exc).__name__] += 1
            return None
        if response.status_code != 200:
            self.errors[str(response.status_code)] += 1
            return None
        into.append(response.headers["x-reef-agent-record-id"])
        self.acknowledged += 1
        message: dict[str, Any] = response.json()["choices"][0]["message"]
        return message


def _next_state(kind: str) -> dict[str, Any]:
    return tool("result: 42") if kind == "__tool__" else user(kind)
