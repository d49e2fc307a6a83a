"""What the judge talks to: the judge model over HTTP, and the recorded exchanges.

:class:`JudgeClient` asks the judge endpoint in one of two dialects (``judge_dialect``),
at most ``concurrency`` requests at once, each bounded by ``timeout_s``; every failure
(refused, timed out, an error status, a reply not in the dialect's shape) is translated
once, here, into :class:`JudgeError` carrying the reason a judgement records:

* ``openai``: ``POST <url>/chat/completions`` with the chat messages; the reply is
  ``choices[0].message.content``.
* ``sglang``: SGLang's native ``POST <root>/generate`` (``<root>``: the URL without a
  trailing ``/v1``, so the OpenAI base of the same server works too) with ``text`` and
  ``sampling_params`` (``temperature``, ``max_new_tokens``, ``stop``; ``n`` left at 1:
  each vote is its own request, timed out and failed on its own, as in the other
  dialect); the reply is ``text``, and ``meta_info.finish_reason`` of type ``abort``
  is a failure. ``/generate`` takes text, not messages: they are rendered as ChatML
  (:func:`render_chatml`), the template of the Qwen family that process-reward models
  are commonly built on; a judge with another template is asked through its OpenAI
  route, where the server applies its own. The model name is not sent (the server
  serves one model); ``judge_model`` still names it in each ``TurnJudged``.

:class:`ExchangeIndex` finds an exchange by its receipt: it indexes ``reef.inference``
(receipt -> partition and offset; bodies are not kept) by bounded reads up to the end
offsets of the moment, so a receipt that a ``TurnCompleted`` names (always appended
before it) is found, and reads that one record back opened through the store's key ring.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from reef.core import topics
from reef.core.errors import CodecError, ConfigError, ReefError
from reef.core.events import InferenceRecorded
from reef.services.eventstore import EventStore

#: reply bytes kept in a failure reason
REASON_CHARS = 200
#: ChatML's turn delimiters (how ``sglang`` renders the judge's messages)
CHATML_START, CHATML_END = "<|im_start|>", "<|im_end|>"

JudgeDialect = Literal["openai", "sglang"]


class JudgeError(ReefError):
    """A judge request failed; the message is the reason a judgement records."""


@dataclass(frozen=True, slots=True)
class JudgeConfig:
    """How to reach the judge model and how much to ask of it (from :class:`Settings`)."""

    url: str
    model: str
    producer: str
    api_key: str | None = None
    votes: int = 3
    hints: bool = False
    concurrency: int = 8
    timeout_s: float = 120.0
    max_tokens: int = 1024
    temperature: float = 0.6
    #: partitions of ``reef.turns`` this judge owns (None: all of them)
    partitions: tuple[int, ...] | None = None
    group: str = "judge"
    dialect: JudgeDialect = "openai"


class JudgeClient:
    """Replies from the judge endpoint, in its dialect; :meth:`aclose` when done."""

    def __init__(
        self, config: JudgeConfig, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        if config.dialect not in DIALECTS:
            raise ConfigError(
                f"judge dialect {config.dialect!r}: expected one of {', '.join(DIALECTS)}"
            )
        headers = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self.config = config
        self.dialect = DIALECTS[config.dialect]
        self._http = httpx.AsyncClient(
            base_url=self.dialect.base(config.url),
            headers=headers,
            timeout=config.timeout_s,
            transport=transport,
        )
        self._slots = asyncio.Semaphore(config.concurrency)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def ask(self, messages: list[dict[str, str]]) -> str:
        """The judge's reply text (raises :class:`JudgeError` with the reason)."""
        body = self.dialect.request(self.config, messages)
        async with self._slots:
            try:
                async with asyncio.timeout(self.config.timeout_s):
                    response = await self._http.post(self.dialect.path, json=body)
            except TimeoutError as exc:
                raise JudgeError(f"timed out after {self.config.timeout_s:g} s") from exc
            except httpx.HTTPError as exc:
                raise JudgeError(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise JudgeError(f"HTTP {response.status_code}: {response.text[:REASON_CHARS]}")
        return self.dialect.reply(response)


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one kind of judge endpoint is asked: its base URL, route, body and reply."""

    base: Callable[[str], str]
    path: str
    request: Callable[[JudgeConfig, list[dict[str, str]]], dict[str, Any]]
    reply: Callable[[httpx.Response], str]


def chat_request(config: JudgeConfig, messages: list[dict[str, str]]) -> dict[str, Any]:
    """The ``openai`` dialect's ``/chat/completions`` body."""
    return {
        "model": config.model,
        "messages": messages,
        "max_tokens": config.max_tokens,
        "temperature": config.temperature,
    }


def chat_reply(response: httpx.Response) -> str:
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, LookupError, TypeError) as exc:
        raise JudgeError(f"not a chat completion: {response.text[:REASON_CHARS]}") from exc
    return content if isinstance(content, str) else ""


def render_chatml(messages: list[dict[str, str]]) -> str:
    """Chat messages as ChatML text, ending where the assistant's reply begins."""
    turns = [f"{CHATML_START}{m['role']}\n{m['content']}{CHATML_END}\n" for m in messages]
    return "".join(turns) + f"{CHATML_START}assistant\n"


def generate_request(config: JudgeConfig, messages: list[dict[str, str]]) -> dict[str, Any]:
    """The ``sglang`` dialect's native ``/generate`` body."""
    sampling = {
        "temperature": config.temperature,
        "max_new_tokens": config.max_tokens,
        "stop": [CHATML_END],
    }
    return {"text": render_chatml(messages), "sampling_params": sampling}


def generate_reply(response: httpx.Response) -> str:
    try:
        body = response.json()
        text, meta = body["text"], body["meta_info"]
        finish = meta.get("finish_reason")
    except (ValueError, LookupError, TypeError, AttributeError) as exc:
        raise JudgeError(f"not a /generate reply: {response.text[:REASON_CHARS]}") from exc
    if isinstance(finish, dict) and finish.get("type") == "abort":
        why = str(finish.get("message") or "no message")
        raise JudgeError(f"generation aborted: {why[:REASON_CHARS]}")
    if not isinstance(text, str):
        raise JudgeError(f"not a /generate reply: {response.text[:REASON_CHARS]}")
    return text


def native_root(url: str) -> str:
    """The server root SGLang's native routes hang from (an OpenAI base ``.../v1`` too)."""
    return url.rstrip("/").removesuffix("/v1")


DIALECTS: dict[str, Dialect] = {
    "openai": Dialect(lambda url: url.rstrip("/"), "/chat/completions", chat_request, chat_reply),
    "sglang": Dialect(native_root, "/generate", generate_request, generate_reply),
}


class ExchangeIndex:
    """Recorded exchanges by receipt (positions only), read back opened on demand."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._where: dict[str, tuple[int, int]] = {}
        self._read: dict[int, int] = {}
        self._lock = asyncio.Lock()

    async def find(self, receipt: str) -> InferenceRecorded:
        """The opened exchange (raises :class:`JudgeError`: unknown, erased, unreadable)."""
        where = self._where.get(receipt) or await self._catch_up(receipt)
        partition, offset = where
        log = self.store.log
        async for record in log.read(
            topics.INFERENCE,
            start={partition: offset},
            partitions=[partition],
            until={partition: offset + 1},
        ):
            stored = await self.store.open(self.store.decode(record))
            if stored.erased:
                raise JudgeError(f"exchange {receipt} was erased")
            if not isinstance(stored.event, InferenceRecorded):
                raise JudgeError(f"exchange {receipt} unreadable: {stored.error}")
            return stored.event
        raise JudgeError(f"exchange {receipt} is no longer in {topics.INFERENCE}")

    async def _catch_up(self, receipt: str) -> tuple[int, int]:
        async with self._lock:
            if receipt not in self._where:
                ends = await self.store.log.end_offsets(topics.INFERENCE)
                async for record in self.store.log.read(
                    topics.INFERENCE, start=dict(self._read), until=ends
                ):
                    self._index(record.partition, record.offset, record.value)
                self._read.update(ends)
        where = self._where.get(receipt)
        if where is None:
            raise JudgeError(f"exchange {receipt} not found in {topics.INFERENCE}")
        return where

    def _index(self, partition: int, offset: int, value: bytes) -> None:
        try:
            event = self.store.codec.decode(value)
        except CodecError:
            return  # not an exchange this reader can name: no turn refers to it
        if isinstance(event, InferenceRecorded):
            self._where[event.event_id] = (partition, offset)


def loads(text: str | None) -> Any:
    """A recorded body as JSON (None when absent or not JSON)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
