"""The judge: a consumer of ``reef.turns`` (group ``judge``) appending ``TurnJudged``.

It runs as ``reef judge`` (its own process, on Kafka) or inside ``reef serve`` on the
embedded log (:func:`in_process_judge`), like the trainer. Each ``TurnCompleted`` is
judged by asking the judge model ``votes`` times (and, with hints on, ``votes`` more
times for a hindsight hint) and deciding by :mod:`reef.core.judging`.

Order of work, written down once (what a crash between two steps means is in brackets):

1. Read the group's committed offsets of ``reef.turns`` and of ``reef.judgements``, and
   remember the ids of the judgements appended since the latter: those whose turns may
   come again (appended, then a crash before step 5).
2. Read ``reef.turns`` from the committed offsets. A ``SessionExpired``, or a turn whose
   judgement id (derived from the turn's event id) is remembered, is done at once.
3. Judge at most ``concurrency`` turns at once: read turn N's exchange and turn N+1's
   request through the key ring (an erased or missing one fails the judgement, with its
   reason), ask the votes in parallel (each request bounded by ``timeout_s``, a failed
   one is an invalid vote; all failed fails the judgement), decide. [A crash here
   re-judges the turn: nothing was appended.]
4. Append ``TurnJudged`` (a failed one too: ``failed_reason`` says why). Its event id is
   derived from the turn, so a re-judgement is the same fact.
5. Commit ``reef.turns``: per partition, the offset of the oldest turn still being
   judged, else the read position. Then commit ``reef.judgements`` up to the first
   judgement whose turn is not yet committed. [A crash before this re-reads turns whose
   judgements are appended: step 1 remembers those judgements, step 2 skips the turns.]

A turn is therefore judged once in the log; if two judges ever raced on a partition,
their judgements would share one event id, and a reader keeps the first per id
(:func:`first_judgements`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from typing import Any

from reef.core import judging, topics
from reef.core.errors import ConfigError
from reef.core.events import TurnCompleted, TurnJudged, utc_now
from reef.core.ids import derived_id
from reef.log.base import LogRecord
from reef.services import supervision
from reef.services.eventstore import EventStore
from reef.services.judge_client import (
    ExchangeIndex,
    JudgeClient,
    JudgeConfig,
    JudgeError,
    loads,
)
from reef.services.supervision import FIRST_BACKOFF_S
from reef.settings import JudgeSettings, Settings, UpstreamSettings

logger = logging.getLogger("reef.judge")


def judgement_id(turn_id: str) -> str:
    """The one id a turn's judgement has, however often it is judged."""
    return derived_id("judged", turn_id)


def first_judgements(events: Iterable[Any]) -> list[TurnJudged]:
    """The judgements a reader counts: the first per event id, in log order."""
    seen: set[str] = set()
    kept = []
    for event in events:
        if isinstance(event, TurnJudged) and event.event_id not in seen:
            seen.add(event.event_id)
            kept.append(event)
    return kept


def judge_config(
    judge: JudgeSettings,
    upstream: UpstreamSettings,
    producer: str,
    partitions: tuple[int, ...] | None = None,
) -> JudgeConfig | None:
    """The deployment's judge (None without an endpoint: no judge URL and no upstream).

    The judge speaks OpenAI chat completions or SGLang's ``/generate``
    (``judge_dialect``): an Anthropic upstream needs a judge URL."""
    url = judge.url or upstream.url
    if url is None:
        return None
    if judge.url is None and upstream.dialect != "openai":
        raise ConfigError("judge_turns: set judge_url (the upstream does not speak OpenAI chat)")
    key = judge.api_key or (None if judge.url else upstream.api_key)
    return JudgeConfig(
        url=url,
        model=judge.model,
        producer=producer,
        api_key=key.get_secret_value() if key is not None else None,
        votes=judge.votes,
        hints=judge.hints,
        concurrency=judge.concurrency,
        timeout_s=judge.timeout_s,
        max_tokens=judge.max_tokens,
        temperature=judge.temperature,
        partitions=partitions,
        dialect=judge.dialect,
    )


class Judge:
    """One member of the ``judge`` group; :meth:`run` until cancelled."""

    def __init__(self, store: EventStore, client: JudgeClient, config: JudgeConfig) -> None:
        self.store = store
        self.client = client
        self.config = config
        self.exchanges = ExchangeIndex(store)
        self.counts: Counter[str] = Counter()
        self.error: str | None = None
        self._reset()

    def _reset(self) -> None:
        self._read: dict[int, int] = {}
        self._in_flight: dict[int, set[int]] = {}
        #: per partition of reef.turns: turn offset -> next offset after its judgement
        self._appended: dict[int, dict[int, int]] = {}
        self._judgements_committed: dict[int, int] = {}
        self._remembered: set[str] = set()
        self._commit_lock = asyncio.Lock()

    def status(self) -> dict[str, Any]:
        """This judge's own figures (``GET /reef/status`` shows them when it runs in the
        API's process): turns being judged now, the last failure, and its counts."""
        in_flight = sum(len(offsets) for offsets in self._in_flight.values())
        return {
            "group": self.config.group,
            "in_flight": in_flight,
            "error": self.error,
            **self.counts,
        }

    async def run(self) -> None:
        self._reset()
        await self._start()
        slots = asyncio.Semaphore(self.config.concurrency)
        async with asyncio.TaskGroup() as tasks:
            async for record in self.store.log.read(
                topics.TURNS, start=dict(self._read), partitions=self._owned(), follow=True
            ):
                await slots.acquire()
                self._in_flight.setdefault(record.partition, set()).add(record.offset)
                self._read[record.partition] = record.offset + 1
                tasks.create_task(self._handle(record, slots))

    def _owned(self) -> list[int]:
        if self.config.partitions is not None:
            return list(self.config.partitions)
        return list(range(self.store.log.partitions))

    async def _start(self) -> None:
        """Step 1: where to start, and the judgements appended since the last commit."""
        log, owned = self.store.log, self._owned()
        turns = await log.committed(self.config.group, topics.TURNS)
        self._read = {p: turns.get(p, 0) for p in owned}
        judged = await log.committed(self.config.group, topics.JUDGEMENTS)
        self._judgements_committed = {p: judged.get(p, 0) for p in owned}
        async for record in log.read(
            topics.JUDGEMENTS, start=dict(self._judgements_committed), partitions=owned
        ):
            event = self.store.decode(record).event
            if isinstance(event, TurnJudged):
                self._remembered.add(event.event_id)
        logger.info(
            "judge %s starts at %s (%d judgements since the last commit)",
            self.config.group,
            {p: o for p, o in self._read.items() if o},
            len(self._remembered),
        )

    async def _handle(self, record: LogRecord, slots: asyncio.Semaphore) -> None:
        try:
            stored = self.store.decode(record)
            event = stored.event
            if event is None:
                self.counts["unreadable"] += 1
                logger.warning(
                    "turn record %s@%s unreadable: %s",
                    record.partition,
                    record.offset,
                    stored.error,
                )
            elif not isinstance(event, TurnCompleted):
                pass  # SessionExpired: nothing to judge
            elif judgement_id(event.event_id) in self._remembered:
                self.counts["skipped_judged"] += 1
            else:
                judged = await self.judge(event)
                position = await self.store.append(judged)
                self._count(judged)
                self._appended.setdefault(record.partition, {})[record.offset] = position.offset + 1
            self._in_flight[record.partition].discard(record.offset)
            await self._commit()
            self.counts["turns_read"] += 1
        finally:
            slots.release()

    async def judge(self, turn: TurnCompleted) -> TurnJudged:
        """Steps 3-4's fact for one turn (a failed judgement carries its reason)."""
        try:
            view = await self._view(turn)
        except JudgeError as exc:
            return self._judged(turn, judging.Decision((), 0), failed=str(exc))
        asks = [self._ask(judging.judge_prompt(view)) for _ in range(self.config.votes)]
        if self.config.hints:
            asks += [self._ask(judging.hint_prompt(view)) for _ in range(self.config.votes)]
        replies = await asyncio.gather(*asks)
        votes, hint_replies = replies[: self.config.votes], replies[self.config.votes :]
        answered = [r for r in votes if not isinstance(r, JudgeError)]
        if not answered:
            return self._judged(
                turn, judging.Decision((None,) * len(votes), 0), failed=f"no vote: {votes[0]}"
            )
        decision = judging.decide(
            [r if isinstance(r, str) else "" for r in votes],
            [r for r in hint_replies if isinstance(r, str)],
        )
        return self._judged(turn, decision)

    async def _ask(self, messages: list[dict[str, str]]) -> str | JudgeError:
        try:
            return await self.client.ask(messages)
        except JudgeError as exc:
            return exc

    async def _view(self, turn: TurnCompleted) -> judging.TurnView:
        exchange = await self.exchanges.find(turn.receipt_id)
        following = await self.exchanges.find(turn.next_receipt_id)
        view = judging.turn_view(
            loads(exchange.request_json),
            loads(exchange.response_json),
            loads(following.request_json),
            exchange.route,
        )
        if view is None:
            raise JudgeError(f"turn {turn.receipt_id} has no readable answer or next state")
        return view

    def _judged(
        self, turn: TurnCompleted, decision: judging.Decision, failed: str | None = None
    ) -> TurnJudged:
        return TurnJudged(
            event_id=judgement_id(turn.event_id),
            scenario=turn.scenario,
            occurred_at=utc_now(),
            producer=self.config.producer,
            turn_id=turn.event_id,
            session_id=turn.session_id,
            turn_index=turn.turn_index,
            receipt_id=turn.receipt_id,
            next_receipt_id=turn.next_receipt_id,
            release_id=turn.release_id,
            judge_model=self.config.model,
            score=decision.score,
            votes=decision.valid_votes,
            invalid_votes=len(decision.votes) - len(decision.valid_votes),
            hints=list(decision.hints),
            next_state_role=turn.next_state_role,
            failed_reason=failed,
        )

    def _count(self, judged: TurnJudged) -> None:
        if judged.failed:
            self.counts["failed"] += 1
            logger.warning("turn %s not judged: %s", judged.receipt_id, judged.failed_reason)
        else:
            self.counts[f"score_{judged.score:+d}".replace("+0", "0")] += 1
        self.counts["judged"] += 1

    async def _commit(self) -> None:
        """Step 5: turns first, then the judgements whose turns are committed."""
        async with self._commit_lock:
            turns = {p: min(self._in_flight.get(p) or {self._read[p]}) for p in self._read}
            await self.store.log.commit(self.config.group, topics.TURNS, turns)
            judged = dict(self._judgements_committed)
            for p, appended in self._appended.items():
                later = [j for t, j in appended.items() if t >= turns[p]]
                done = [j for t, j in appended.items() if t < turns[p]]
                judged[p] = min(later) - 1 if later else max([judged.get(p, 0), *done])
                self._appended[p] = {t: j for t, j in appended.items() if t >= turns[p]}
            if judged != self._judgements_committed:
                await self.store.log.commit(self.config.group, topics.JUDGEMENTS, judged)
                self._judgements_committed = judged


@contextlib.asynccontextmanager
async def running_judge(store: EventStore, config: JudgeConfig) -> AsyncIterator[Judge]:
    """A judge with its HTTP client open (closed on exit); not started."""
    client = JudgeClient(config)
    try:
        yield Judge(store, client, config)
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def in_process_judge(
    settings: Settings,
    store: EventStore,
    producer: str,
    *,
    first_backoff_s: float = FIRST_BACKOFF_S,
) -> AsyncIterator[Judge | None]:
    """The judge as a supervised task of the app; None unless sessions are tracked and
    ``judge_turns`` is on with an endpoint (``settings``: with the serving upstream)."""
    config = (
        judge_config(settings.judge, settings.upstream, producer) if settings.judge.turns else None
    )
    if config is None or not settings.sessions.track:
        yield None
        return
    async with running_judge(store, config) as judge:
        task = asyncio.create_task(supervise(judge, first_backoff_s), name="judge")
        try:
            yield judge
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def supervise(judge: Judge, first_backoff_s: float = FIRST_BACKOFF_S) -> None:
    """Run the judge; after a failure log it, show it in status and start again (it
    resumes from its committed offsets, as after a crash)."""

    def failed(error: str) -> None:
        judge.error = error

    await supervision.supervise(
        "judge", judge.run, on_failure=failed, first_backoff_s=first_backoff_s
    )
