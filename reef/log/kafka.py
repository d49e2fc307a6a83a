"""The Kafka event log: aiokafka idempotent producer (acks=all) and read_committed readers.

``append`` returns only after every in-sync replica acknowledged the record (the
producer is idempotent, so a retried send never duplicates). Topics are created with
infinite retention and, on a cluster of three or more brokers, replication factor 3 and
``min.insync.replicas=2``. aiokafka errors are translated once, here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from aiokafka.structs import OffsetAndMetadata

from reef.core.errors import LogUnavailableError, UnknownTopicError
from reef.log.base import Headers, LogRecord, PendingAppend, Position

_FETCH_TIMEOUT_MS: Final = 200
#: the longest the broker holds a follower's fetch while nothing new is readable: every
#: hop between processes that follow each other's transactional writes (samples ->
#: trainer -> proposals -> chain -> releases) may wait that long, so it is well below
#: aiokafka's default (500 ms). At 100 ms (the stream workers' own setting) an idle
#: follower asks 10 times a second.
_FETCH_MAX_WAIT_MS: Final = 100


class KafkaLog:
    """:class:`reef.log.base.EventLog` on Apache Kafka."""

    def __init__(
        self,
        bootstrap: str,
        *,
        partitions: int = 6,
        client_id: str = "reef",
        compression: str | None = "lz4",
        linger_ms: int = 0,
        request_timeout_ms: int = 15000,
        topic_prefix: str = "",
        append_timeout_s: float = 10.0,
        topic_configs: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self._partitions = partitions
        self._client_id = client_id
        self._compression = compression
        self._linger_ms = linger_ms
        self._request_timeout_ms = request_timeout_ms
        self._producer: AIOKafkaProducer | None = None
        #: namespaces every topic and consumer group on the cluster (tests, several
        #: deployments on one cluster); callers always see the unprefixed names
        self.topic_prefix = topic_prefix
        #: aiokafka retries a dead broker for ever; past this an append is refused
        #: (the record may still land later: durable but never acknowledged)
        self._append_timeout_s = append_timeout_s
        #: per-topic configs over the defaults (the compacted key topic), unprefixed names
        self._topic_configs = {t: dict(c) for t, c in (topic_configs or {}).items()}
        self._offsets = _OffsetClients(bootstrap, client_id, request_timeout_ms)

    @property
    def partitions(self) -> int:
        return self._partitions

    async def start(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            client_id=self._client_id,
            enable_idempotence=True,
            acks="all",
            compression_type=self._compression,
            linger_ms=self._linger_ms,
            request_timeout_ms=self._request_timeout_ms,
        )
        try:
            await producer.start()
        except KafkaError as exc:
            await producer.stop()
            raise LogUnavailableError(f"cannot reach Kafka at {self.bootstrap}: {exc}") from exc
        self._producer = producer

    async def close(self) -> None:
        await self._offsets.close()
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()

    async def ensure_topics(self, topics: Sequence[str]) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, client_id=self._client_id)
        try:
            await admin.start()
            brokers = len((await admin.describe_cluster())["brokers"])
            replication = min(3, brokers)
            configs = {
                "retention.ms": "-1",
                "retention.bytes": "-1",
                "min.insync.replicas": "2" if replication >= 3 else "1",
            }
            existing = set(await admin.list_topics())
            wanted = [t for t in topics if self._t(t) not in existing]
            missing = [self._t(t) for t in wanted]
            if missing:
                new = [
                    NewTopic(
                        self._t(t),
                        self._partitions,
                        replication,
                        topic_configs={**configs, **self._topic_configs.get(t, {})},
                    )
                    for t in wanted
                ]
                with contextlib.suppress(TopicAlreadyExistsError):
                    await admin.create_topics(new)
                await self._await_visible(admin, missing)
        except KafkaError as exc:
            raise LogUnavailableError(f"cannot create topics on {self.bootstrap}: {exc}") from exc
        finally:
            await admin.close()

    async def _await_visible(self, admin: AIOKafkaAdminClient, names: Sequence[str]) -> None:
        """Return once the metadata shows ``names`` with their partitions.

        CreateTopics answers when the controller has the topic; the brokers learn of it a
        moment later, and a client that asks one of them in between sees no partitions.
        """
        deadline = asyncio.get_running_loop().time() + self._request_timeout_ms / 1000
        while True:
            descriptions = await admin.describe_topics(list(names))
            pending = [
                d["topic"]
                for d in descriptions
                if d.get("error_code", 0) != 0 or not d.get("partitions")
            ]
            if not pending:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise LogUnavailableError(f"topics {pending} created but not visible in time")
            await asyncio.sleep(0.1)

    async def append(self, topic: str, key: bytes, value: bytes, headers: Headers = ()) -> Position:
        (position,) = await self.append_many([PendingAppend(topic, key, value, tuple(headers))])
        return position

    async def append_many(self, records: Sequence[PendingAppend]) -> list[Position]:
        producer = self._require_producer()
        try:
            async with asyncio.timeout(self._append_timeout_s):
                futures = [
                    await producer.send(
                        self._t(r.topic), r.value, key=r.key, headers=list(r.headers)
                    )
                    for r in records
                ]
                metadata = await asyncio.gather(*futures)
        except TimeoutError as exc:
            missing = await self._missing_topics({r.topic for r in records})
            if missing:  # aiokafka waits for metadata of an unknown topic until the timeout
                raise UnknownTopicError(f"unknown topic {missing[0]!r}") from exc
            raise LogUnavailableError(
                f"Kafka did not acknowledge the write within {self._append_timeout_s:g}s"
            ) from exc
        except KafkaError as exc:
            raise _translate(exc) from exc
        return [Position(self._untag(m.topic), m.partition, m.offset) for m in metadata]

    async def end_offsets(self, topic: str) -> dict[int, int]:
        async with self._offset_clients() as clients:
            consumer = await clients.consumer()
            try:
                tps = await self._partitions_of(consumer, self._t(topic))
                ends = await consumer.end_offsets(tps)
            except KafkaError as exc:
                raise clients.failed(exc) from exc
        return {tp.partition: int(offset) for tp, offset in ends.items()}

    async def read(
        self,
        topic: str,
        *,
        start: Mapping[int, int] | None = None,
        partitions: Sequence[int] | None = None,
        follow: bool = False,
        until: Mapping[int, int] | None = None,
    ) -> AsyncIterator[LogRecord]:
        async with self._consumer() as consumer:
            tps = await self._partitions_of(consumer, self._t(topic))
            if partitions is not None:
                tps = [tp for tp in tps if tp.partition in set(partitions)]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, (start or {}).get(tp.partition, 0))
            if follow:
                stop = None
            elif until is not None:
                stop = {tp: until.get(tp.partition, 0) for tp in tps}
            else:
                stop = await consumer.end_offsets(tps)
            while True:
                if stop is not None and all([await _reached(consumer, tp, stop[tp]) for tp in tps]):
                    return
                batches = await consumer.getmany(timeout_ms=_FETCH_TIMEOUT_MS)
                for tp, messages in batches.items():
                    for m in messages:
                        if stop is not None and m.offset >= stop[tp]:
                            continue
                        yield LogRecord(
                            topic,
                            m.partition,
                            m.offset,
                            m.key,
                            m.value if m.value is not None else b"",  # tombstone
                            tuple((k, bytes(v)) for k, v in m.headers),
                            int(m.timestamp),
                        )

    async def committed(self, group: str, topic: str) -> dict[int, int]:
        """The committed offsets of ``group`` (namespaced by the prefix, like topics)."""
        async with self._offset_clients() as clients:
            consumer = await clients.consumer()
            admin = await clients.admin()
            try:
                tps = await self._partitions_of(consumer, self._t(topic))
                found = await admin.list_consumer_group_offsets(self._t(group), partitions=tps)
            except KafkaError as exc:
                raise clients.failed(exc) from exc
        # -1: no offset committed for that partition
        return {tp.partition: int(meta.offset) for tp, meta in found.items() if meta.offset >= 0}

    async def commit(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        async with self._consumer(group=self._t(group)) as consumer:
            await self._partitions_of(
                consumer, self._t(topic)
            )  # aiokafka retries unknown topics forever
            tps = [TopicPartition(self._t(topic), p) for p in offsets]
            consumer.assign(tps)
            try:
                await consumer.commit(
                    {
                        TopicPartition(self._t(topic), p): OffsetAndMetadata(o, "")
                        for p, o in offsets.items()
                    }
                )
            except KafkaError as exc:
                raise _translate(exc) from exc

    # -- helpers -------------------------------------------------------------------

    def _t(self, topic: str) -> str:
        return self.topic_prefix + topic

    def _untag(self, topic: str) -> str:
        return topic.removeprefix(self.topic_prefix)

    async def _missing_topics(self, names: set[str]) -> list[str]:
        """Which of ``names`` the cluster does not know, asked within the append timeout:
        a broker that does not answer at all (stalled, partitioned) must not hold the
        refusal back for a metadata request's own, longer timeout; it counts as none."""
        try:
            async with asyncio.timeout(self._append_timeout_s):
                return [t for t in sorted(names) if not await self._exists(t)]
        except TimeoutError:
            return []

    async def _exists(self, topic: str) -> bool:
        try:
            async with self._consumer() as consumer:
                await self._partitions_of(consumer, self._t(topic))
        except UnknownTopicError:
            return False
        except LogUnavailableError:
            return True  # cannot tell: report the log as unavailable
        return True

    def _require_producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise LogUnavailableError("the Kafka log is not started")
        return self._producer

    @contextlib.asynccontextmanager
    async def _offset_clients(self) -> AsyncIterator[_OffsetClients]:
        """The kept offset clients of a started log (stopped by :meth:`close`); a log
        that was never started is never closed either, so it gets clients for one question."""
        if self._producer is not None:
            yield self._offsets
            return
        clients = _OffsetClients(self.bootstrap, self._client_id, self._request_timeout_ms)
        try:
            yield clients
        finally:
            await clients.close()

    @contextlib.asynccontextmanager
    async def _consumer(self, group: str | None = None) -> AsyncIterator[AIOKafkaConsumer]:
        options: dict[str, Any] = {"group_id": group} if group else {}
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            client_id=self._client_id,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=self._request_timeout_ms,
            fetch_max_wait_ms=_FETCH_MAX_WAIT_MS,
            **options,
        )
        try:
            await consumer.start()
        except BaseException as exc:  # also a timeout's cancellation: never leak the client
            await asyncio.shield(consumer.stop())
            if isinstance(exc, KafkaError):
                raise LogUnavailableError(f"cannot reach Kafka at {self.bootstrap}: {exc}") from exc
            raise
        try:
            yield consumer
        finally:
            await consumer.stop()

    @staticmethod
    async def _partitions_of(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
        found = consumer.partitions_for_topic(topic)
        if not found:
            await consumer._client.force_metadata_update()
            found = consumer.partitions_for_topic(topic)
        if not found:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        return [TopicPartition(topic, p) for p in sorted(found)]


async def _reached(consumer: AIOKafkaConsumer, tp: TopicPartition, stop: int) -> bool:
    return int(await consumer.position(tp)) >= stop


async def delete_prefixed_topics(bootstrap: str, prefix: str) -> list[str]:
    """Delete every topic named ``prefix...`` (a namespaced deployment's topics, its
    changelogs and key topic: test and benchmark teardown); returns the names deleted."""
    if not prefix:
        raise ValueError("refusing to delete topics without a prefix")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        mine = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if mine:
            await admin.delete_topics(mine)
    finally:
        await admin.close()
    return mine


class _OffsetClients:
    """A consumer (no group, ``read_committed``) and an admin client for offset questions,
    started at the first question and kept until the log closes.

    The API asks for every processor's lag every 2 seconds (end offsets and the
    group's committed offsets of each input topic). Starting a client for each question
    (connection, metadata, coordinator look-up, then stopped) would put that work on the
    serving event loop, per topic, in bursts that hold requests back.
    """

    def __init__(self, bootstrap: str, client_id: str, request_timeout_ms: int) -> None:
        self._bootstrap = bootstrap
        self._client_id = client_id
        self._request_timeout_ms = request_timeout_ms
        self._consumer: AIOKafkaConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._starting = asyncio.Lock()

    async def consumer(self) -> AIOKafkaConsumer:
        async with self._starting:
            if self._consumer is None:
                consumer = AIOKafkaConsumer(
                    bootstrap_servers=self._bootstrap,
                    client_id=self._client_id,
                    isolation_level="read_committed",
                    enable_auto_commit=False,
                    request_timeout_ms=self._request_timeout_ms,
                )
                await self._started(consumer)
                self._consumer = consumer
            return self._consumer

    async def admin(self) -> AIOKafkaAdminClient:
        async with self._starting:
            if self._admin is None:
                admin = AIOKafkaAdminClient(
                    bootstrap_servers=self._bootstrap,
                    client_id=self._client_id,
                    request_timeout_ms=self._request_timeout_ms,
                )
                await self._started(admin)
                self._admin = admin
            return self._admin

    async def _started(self, client: AIOKafkaConsumer | AIOKafkaAdminClient) -> None:
        try:
            await client.start()
        except BaseException as exc:  # also a timeout's cancellation: never leak the client
            await asyncio.shield(_stop(client))
            if isinstance(exc, KafkaError):
                raise self.failed(exc) from exc
            raise

    def failed(self, exc: KafkaError) -> Exception:
        if isinstance(exc, UnknownTopicOrPartitionError):
            return UnknownTopicError(f"unknown topic: {exc}")
        return LogUnavailableError(f"cannot read offsets from Kafka at {self._bootstrap}: {exc}")

    async def close(self) -> None:
        async with self._starting:
            consumer, self._consumer = self._consumer, None
            admin, self._admin = self._admin, None
        for client in (consumer, admin):
            if client is not None:
                await _stop(client)


async def _stop(client: AIOKafkaConsumer | AIOKafkaAdminClient) -> None:
    if isinstance(client, AIOKafkaAdminClient):
        await client.close()
    else:
        await client.stop()


def _translate(exc: KafkaError) -> Exception:
    if isinstance(exc, UnknownTopicOrPartitionError):  # no metadata for it within the timeout
        return UnknownTopicError(f"unknown topic: {exc}")
    return LogUnavailableError(f"Kafka did not acknowledge the write: {exc}")
