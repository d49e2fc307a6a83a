"""The EventLog contract: one suite every adapter must pass (not collected by itself).

Subclass :class:`LogContract` in a ``test_*.py`` module and provide a ``log`` fixture
that yields a *started* adapter with :attr:`LogContract.PARTITIONS` partitions per topic.
Every test names its own topics (:meth:`LogContract.new_topic_name`, a fixture a test
module may override), so a shared broker is never confused between tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence

import pytest
import pytest_asyncio

from reef.core.errors import UnknownTopicError
from reef.log.base import EventLog, LogRecord, PendingAppend, Position
from reef.log.partitioner import partition_for

READ_TIMEOUT = 20.0


def _closable(records: AsyncIterator[LogRecord]) -> AsyncGenerator[LogRecord, None]:
    """``EventLog.read`` as what it is in every implementation: an async generator (closed
    with ``aclose()``, as :func:`contextlib.aclosing` needs)."""
    assert isinstance(records, AsyncGenerator), type(records)
    return records


async def read_all(
    log: EventLog,
    topic: str,
    *,
    start: Mapping[int, int] | None = None,
    partitions: Sequence[int] | None = None,
    timeout: float = READ_TIMEOUT,
) -> list[LogRecord]:
    """Everything a non-following read yields (it must end by itself)."""
    out: list[LogRecord] = []
    async with asyncio.timeout(timeout):
        async with contextlib.aclosing(
            _closable(log.read(topic, start=start, partitions=partitions, follow=False))
        ) as records:
            async for record in records:
                out.append(record)
    return out


async def read_following(
    log: EventLog,
    topic: str,
    count: int,
    *,
    start: Mapping[int, int] | None = None,
    started: asyncio.Event | None = None,
    timeout: float = READ_TIMEOUT,
) -> list[LogRecord]:
    """The first ``count`` records a following read yields."""
    out: list[LogRecord] = []
    async with asyncio.timeout(timeout):
        async with contextlib.aclosing(
            _closable(log.read(topic, start=start, follow=True))
        ) as records:
            if started is not None:
                started.set()
            async for record in records:
                out.append(record)
                if len(out) == count:
                    break
    return out


def by_partition(records: Sequence[LogRecord]) -> dict[int, list[LogRecord]]:
    out: dict[int, list[LogRecord]] = defaultdict(list)
    for record in records:
        out[record.partition].append(record)
    return dict(out)


def key_owning(partition: int, partitions: int, prefix: str = "key") -> bytes:
    """Some key that the partitioner sends to ``partition``."""
    for i in range(10_000):
        key = f"{prefix}-{i}".encode()
        if partition_for(key, partitions) == partition:
            return key
    raise AssertionError("no key found")


class LogContract:
    """Tests every :class:`reef.log.base.EventLog` adapter must pass."""

    pytestmark = pytest.mark.asyncio
    PARTITIONS = 3

    @pytest.fixture
    def new_topic_name(self, request: pytest.FixtureRequest) -> Callable[..., str]:
        """A factory of unique, legal topic names: ``new_topic_name("prefix")``."""
        test = re.sub(r"[^A-Za-z0-9-]+", "-", request.node.name).strip("-")[:60]

        def make(prefix: str = "t") -> str:
            clean = re.sub(r"[^A-Za-z0-9-]+", "-", prefix).strip("-")[:40] or "t"
            return f"{clean}.{test}.{uuid.uuid4().hex[:12]}"

        return make

    @pytest_asyncio.fixture
    async def topic(self, log: EventLog, new_topic_name: Callable[..., str]) -> str:
        name = new_topic_name("contract")
        await log.ensure_topics([name])
        return name

    # -- append -------------------------------------------------------------------

    async def test_partitions_property(self, log: EventLog, topic: str) -> None:
        assert log.partitions == self.PARTITIONS
        assert set(await log.end_offsets(topic)) == set(range(self.PARTITIONS))

    async def test_append_returns_its_position(self, log: EventLog, topic: str) -> None:
        key = b"scenario-a"
        first = await log.append(topic, key, b"one")
        second = await log.append(topic, key, b"two")
        partition = partition_for(key, self.PARTITIONS)
        assert first == Position(topic, partition, 0)
        assert second == Position(topic, partition, 1)
        other = key_owning((partition + 1) % self.PARTITIONS, self.PARTITIONS)
        assert await log.append(topic, other, b"x") == Position(
            topic, (partition + 1) % self.PARTITIONS, 0
        )
        records = await read_all(log, topic)
        found = {(r.partition, r.offset): r.value for r in records}
        assert found[(partition, 0)] == b"one"
        assert found[(partition, 1)] == b"two"

    async def test_ensure_topics_is_idempotent(self, log: EventLog, topic: str) -> None:
        await log.append(topic, b"k", b"v")
        await log.ensure_topics([topic])
        assert sum((await log.end_offsets(topic)).values()) == 1

    async def test_batch_append(self, log: EventLog, topic: str) -> None:
        batch = [
            PendingAppend(topic, f"k{i % 7}".encode(), f"value-{i}".encode(), (("n", b"%d" % i),))
            for i in range(40)
        ]
        positions = await log.append_many(batch)
        assert len(positions) == len(batch)
        next_offset: dict[int, int] = defaultdict(int)
        for pending, position in zip(batch, positions, strict=True):
            partition = partition_for(pending.key, self.PARTITIONS)
            assert position == Position(topic, partition, next_offset[partition])
            next_offset[partition] += 1
        stored = {(r.partition, r.offset): r for r in await read_all(log, topic)}
        assert len(stored) == len(batch)
        for pending, position in zip(batch, positions, strict=True):
            record = stored[(position.partition, position.offset)]
            assert (record.key, record.value, record.headers) == (
                pending.key,
                pending.value,
                tuple(pending.headers),
            )

    async def test_empty_batch(self, log: EventLog, topic: str) -> None:
        assert await log.append_many([]) == []
        assert await read_all(log, topic) == []

    async def test_concurrent_appends_get_distinct_positions(
        self, log: EventLog, topic: str
    ) -> None:
        positions = await asyncio.gather(
            *(log.append(topic, f"k{i % 5}".encode(), b"%d" % i) for i in range(60))
        )
        assert len(set(positions)) == 60
        for partition, group in by_partition(await read_all(log, topic)).items():
            assert [r.offset for r in group] == list(range(len(group))), partition
        ends = await log.end_offsets(topic)
        for position in positions:
            assert position.offset < ends[position.partition]

    async def test_same_key_same_partition_as_partition_for(
        self, log: EventLog, topic: str
    ) -> None:
        keys = [f"scenario-{i}".encode() for i in range(60)] + ["日本".encode(), b"", b"\xff\x00"]
        positions = await log.append_many([PendingAppend(topic, k, k) for k in keys])
        for key, position in zip(keys, positions, strict=True):
            assert position.partition == partition_for(key, self.PARTITIONS), key
        again = await log.append_many([PendingAppend(topic, k, b"again") for k in keys])
        assert [p.partition for p in again] == [p.partition for p in positions]
        for record in await read_all(log, topic):
            assert record.partition == partition_for(record.key or b"", self.PARTITIONS)

    # -- read ---------------------------------------------------------------------

    async def test_per_partition_order(self, log: EventLog, topic: str) -> None:
        sent: dict[int, list[bytes]] = defaultdict(list)
        for i in range(60):
            key = f"k{i % 4}".encode()
            value = f"{key.decode()}:{i}".encode()
            await log.append(topic, key, value)
            sent[partition_for(key, self.PARTITIONS)].append(value)
        got = by_partition(await read_all(log, topic))
        assert set(got) == set(sent)
        for partition, records in got.items():
            assert [r.offset for r in records] == list(range(len(records)))
            assert [r.value for r in records] == sent[partition]
            assert all(r.topic == topic for r in records)

    async def test_read_from_an_offset(self, log: EventLog, topic: str) -> None:
        keys = {p: key_owning(p, self.PARTITIONS) for p in range(self.PARTITIONS)}
        for i in range(5):
            await log.append_many([PendingAppend(topic, keys[p], b"%d" % i) for p in keys])
        records = await read_all(log, topic, start={0: 3, 1: 5})
        got = {p: [r.offset for r in rs] for p, rs in by_partition(records).items()}
        assert got.get(0) == [3, 4]
        assert 1 not in got  # started at its end
        for p in range(2, self.PARTITIONS):
            assert got[p] == [0, 1, 2, 3, 4]  # not in start: from the beginning
        assert [r.value for r in records if r.partition == 0] == [b"3", b"4"]

    async def test_read_selected_partitions(self, log: EventLog, topic: str) -> None:
        keys = {p: key_owning(p, self.PARTITIONS) for p in range(self.PARTITIONS)}
        await log.append_many([PendingAppend(topic, keys[p], b"v") for p in keys for _ in range(3)])
        only = await read_all(log, topic, partitions=[1])
        assert {r.partition for r in only} == {1}
        assert [r.offset for r in only] == [0, 1, 2]
        some = await read_all(log, topic, partitions=[0, 2], start={2: 2})
        assert sorted((r.partition, r.offset) for r in some) == [(0, 0), (0, 1), (0, 2), (2, 2)]

    async def test_read_stops_at_the_end_without_follow(self, log: EventLog, topic: str) -> None:
        assert await read_all(log, topic, timeout=10) == []
        await log.append_many([PendingAppend(topic, f"k{i}".encode(), b"v") for i in range(10)])
        started = time.monotonic()
        assert len(await read_all(log, topic, timeout=10)) == 10
        assert time.monotonic() - started < 10

    async def test_read_without_follow_ignores_later_appends(
        self, log: EventLog, topic: str
    ) -> None:
        await log.append_many([PendingAppend(topic, b"k", b"%d" % i) for i in range(3)])
        seen = []
        async with asyncio.timeout(READ_TIMEOUT):
            async with contextlib.aclosing(_closable(log.read(topic))) as records:
                async for record in records:
                    seen.append(record.value)
                    if len(seen) == 1:
                        await log.append(topic, b"k", b"late")
        assert seen == [b"0", b"1", b"2"]

    async def test_follow_sees_later_appends(self, log: EventLog, topic: str) -> None:
        await log.append(topic, b"early", b"before")
        started = asyncio.Event()
        reader = asyncio.create_task(read_following(log, topic, 1 + 10, started=started))
        await started.wait()
        await asyncio.sleep(0.5)  # the reader is now waiting at the end
        for i in range(5):
            await log.append(topic, f"k{i}".encode(), b"later-%d" % i)
        await asyncio.sleep(0.3)
        await log.append_many(
            [PendingAppend(topic, f"k{i}".encode(), b"later-%d" % i) for i in range(5, 10)]
        )
        records = await asyncio.wait_for(reader, READ_TIMEOUT)
        values = sorted(r.value for r in records)
        assert values == sorted([b"before"] + [b"later-%d" % i for i in range(10)])

    async def test_follow_from_an_offset(self, log: EventLog, topic: str) -> None:
        key = key_owning(0, self.PARTITIONS)
        for i in range(3):
            await log.append(topic, key, b"%d" % i)
        ends = await log.end_offsets(topic)
        reader = asyncio.create_task(read_following(log, topic, 2, start=ends))
        await asyncio.sleep(0.5)
        await log.append(topic, key, b"new-1")
        await log.append(topic, key_owning(2, self.PARTITIONS), b"new-2")
        records = await asyncio.wait_for(reader, READ_TIMEOUT)
        assert sorted(r.value for r in records) == [b"new-1", b"new-2"]
        assert [(r.partition, r.offset) for r in records if r.partition == 0] == [(0, 3)]

    # -- offsets ------------------------------------------------------------------

    async def test_end_offsets(self, log: EventLog, topic: str) -> None:
        assert await log.end_offsets(topic) == dict.fromkeys(range(self.PARTITIONS), 0)
        counts: dict[int, int] = dict.fromkeys(range(self.PARTITIONS), 0)
        for i in range(25):
            position = await log.append(topic, f"key-{i}".encode(), b"v")
            counts[position.partition] += 1
        assert await log.end_offsets(topic) == counts

    async def test_commit_round_trip_per_group(self, log: EventLog, topic: str) -> None:
        for i in range(12):
            await log.append(topic, f"key-{i}".encode(), b"v")
        assert await log.committed("group-a", topic) == {}
        await log.commit("group-a", topic, {0: 1, 2: 2})
        assert await log.committed("group-a", topic) == {0: 1, 2: 2}
        assert await log.committed("group-b", topic) == {}
        await log.commit("group-b", topic, {1: 1})
        await log.commit("group-a", topic, {0: 2})  # moves 0, keeps 2
        assert await log.committed("group-a", topic) == {0: 2, 2: 2}
        assert await log.committed("group-b", topic) == {1: 1}

    async def test_commits_are_per_topic(
        self, log: EventLog, topic: str, new_topic_name: Callable[..., str]
    ) -> None:
        other = new_topic_name("contract-other")
        await log.ensure_topics([other])
        await log.commit("group", topic, {0: 0, 1: 0})
        assert await log.committed("group", other) == {}
        assert await log.committed("group", topic) == {0: 0, 1: 0}

    # -- errors -------------------------------------------------------------------

    async def test_unknown_topic(self, log: EventLog, new_topic_name: Callable[..., str]) -> None:
        missing = new_topic_name("never-created")
        with pytest.raises(UnknownTopicError):
            await log.end_offsets(missing)
        with pytest.raises(UnknownTopicError):
            await read_all(log, missing)
        with pytest.raises(UnknownTopicError):  # Kafka: after its metadata timeout (15 s)
            await log.append_many([PendingAppend(missing, b"k", b"v")])
        with pytest.raises(UnknownTopicError):
            await log.committed("group", missing)
        with pytest.raises(UnknownTopicError):
            await asyncio.wait_for(log.commit("group", missing, {0: 1}), READ_TIMEOUT)

    # -- bytes ----------------------------------------------------------------------

    async def test_bytes_and_headers_round_trip_exactly(self, log: EventLog, topic: str) -> None:
        cases: list[tuple[bytes, bytes, tuple[tuple[str, bytes], ...]]] = [
            (b"k", bytes(range(256)) * 4, ()),
            (b"\x00\xff\xfe binary key", b"", (("empty", b""),)),
            ("ключ-日本".encode(), "значение 😀".encode(), (("ünï", "😀".encode()),)),
            (b"dup", b"\xc3\x01" + b"\x00" * 8, (("h", b"1"), ("h", b"2"), ("a", b"\x00\xff"))),
            (b"big", bytes(i % 251 for i in range(100_000)), (("reef-event-type", b"X"),)),
        ]
        positions = await log.append_many(
            [PendingAppend(topic, key, value, headers) for key, value, headers in cases]
        )
        single = await log.append(topic, b"single", b"\x00", [("x", b"y")])
        stored = {(r.partition, r.offset): r for r in await read_all(log, topic)}
        now_ms = time.time() * 1000
        for (key, value, headers), position in zip(cases, positions, strict=True):
            record = stored[(position.partition, position.offset)]
            assert record.key == key
            assert record.value == value
            assert record.headers == headers
            assert isinstance(record.value, bytes)
            assert all(isinstance(v, bytes) for _, v in record.headers)
            assert abs(record.timestamp_ms - now_ms) < 120_000
        record = stored[(single.partition, single.offset)]
        assert (record.key, record.value, record.headers) == (b"single", b"\x00", (("x", b"y"),))
