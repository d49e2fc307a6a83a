"""The Faust app: one agent and one changelog-backed table per processor.

Each agent consumes its processor's co-partitioned input topics as raw bytes, decodes
with Reef's codec, runs the pure step against the table, and sends the outputs keyed by
scenario, so they land in the same partition number. ``processing_guarantee`` is
``exactly_once``: table changelog writes, outputs and input offsets commit in one Kafka
transaction per partition. Faust has open bugs around rebalances under exactly-once, so
the steps are idempotent on their own (remembered ids, deterministic output ids).

Tables live in RocksDB (``rocksdb://`` through the ``rocksdict`` binding) in the worker's
data directory (:mod:`streams.datadir`: emptied at each start, so a table is always
restored from its committed changelog), with small write buffers and block caches, so a
worker's memory does not grow with the join's state.

Faust gaps closed here (found by the SIGKILL test):

* an event's outputs and its table writes (their changelog records) are sent on the
  input partition's transactional producer while holding that producer's transaction
  lock, so Faust's periodic commit never lands between them: they are in one
  transaction, committed or aborted together. Faust sends outputs outside any
  transaction, and its table writes through a buffer drained by a background task
  (flushing it is no barrier: ``ProducerBuffer.flush`` returns once the queue is empty,
  while the last record still waits for the lock), so a commit could carry an event's
  samples without the state that remembers it: after a SIGKILL the redelivered event
  was joined again (a duplicate sample), or the other way round (a missing one). The
  input offset is acknowledged afterwards and may commit in a later transaction: a
  redelivery then meets the state it left and is a no-op;
* a transactional producer that cannot send or commit (an abortable error after a broker
  stall, a fence) leaves Faust committing nothing forever; the worker exits instead
  (:func:`_die`, exit status 75) without committing, as if SIGKILLed, so a supervisor
  restarts it and the tables come back from the committed changelog (see
  :mod:`streams.datadir`); a rebalance no longer re-begins transactions already open;
* a worker that stops making progress without failing (seen after a broker was killed and
  after a restart under load) exits the same way (:mod:`streams.watchdog`), and so does a
  commit that hangs;
* the changelog topics are created before the worker joins its group
  (:func:`ensure_changelog_topics`), replicated like Reef's topics.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any, Final, NoReturn

import faust
from faust.transport.consumer import TransactionManager
from faust.types import TP

from reef.codec import EventCodec
from reef.log.kafka import KafkaLog
from reef.processors.catalog import processors
from reef.processors.state import Processor
from reef.settings import Settings
from reef.topics import STREAMS_APP_ID
from streams import watchdog
from streams.state import ChangelogRecord, TableState

logger = logging.getLogger(__name__)

APP_ID = STREAMS_APP_ID

#: exit status of a worker that stops because a transaction can no longer complete
EXIT_TRANSACTION_FAILED: Final = 75

#: per table partition (one RocksDB each): memtables and block cache, so the memory a
#: worker holds for its tables is bounded (RocksDB's defaults: 3 x 64 MB and 2 GB)
ROCKSDB_OPTIONS: Final[dict[str, int]] = {
    "write_buffer_size": 4 * 1024 * 1024,
    "max_write_buffer_number": 2,
    "block_cache_size": 8 * 1024 * 1024,
}


def data_dir_base(settings: Settings) -> Path:
    """Where this deployment's workers keep their data directories (see streams.datadir)."""
    return settings.state_dir / "streams" / (settings.kafka_topic_prefix + STREAMS_APP_ID)


def _die(reason: str, exc: BaseException | None = None) -> NoReturn:
    """Exit now, committing nothing: the open transactions are aborted by the next worker.

    A graceful stop would commit the open transactions (Faust commits on stop), which may
    hold part of an event's effects; the local tables may hold writes that will never
    commit. Exiting like a SIGKILL is the one path exactly-once is built for.
    """
    logger.critical("exactly-once cannot continue (%s): exiting", reason, exc_info=exc)
    logging.shutdown()
    sys.stderr.flush()
    os._exit(EXIT_TRANSACTION_FAILED)


class ReefTransactionManager(TransactionManager):
    """Faust's transaction manager, minus two ways of wedging a worker.

    * A commit that fails (other than by a fence, which Faust already crashes on) leaves
      the producer in an abortable error: Faust logs it and fails every later commit. The
      worker exits instead (:func:`_die`).
    * On every rebalance Faust begins a transaction on the producer of every assigned
      partition, also on producers whose transaction is open ("Invalid state transition
      IN_TRANSACTION -> IN_TRANSACTION"); only producers without one are begun here.
    """

    def __init__(self, *args: Any, commit_timeout_s: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._commit_timeout_s = commit_timeout_s

    async def commit(self, offsets: Mapping[Any, int], start_new_transaction: bool = True) -> bool:
        committing = super().commit(offsets, start_new_transaction=start_new_transaction)
        try:
            return await asyncio.wait_for(committing, self._commit_timeout_s)
        except asyncio.CancelledError:
            raise
        except TimeoutError:  # a commit that hangs holds every later one (and the agents)
            _die(f"transaction commit did not complete in {self._commit_timeout_s:.0f} s")
        except Exception as exc:  # any failure leaves the transaction unknown
            _die("transaction commit failed", exc)

    async def _start_transactions(self, tids: Iterable[str]) -> None:
        producers = _transaction_producers(self.producer)
        idle = []
        for tid in tids:
            existing = producers.get(tid)
            manager = getattr(existing, "_txn_manager", None)
            if manager is not None and manager.is_in_transaction():
                continue
            idle.append(tid)
        await super()._start_transactions(idle)


def changelog_topics(app: faust.App) -> list[str]:
    """The full names of the app's table changelog topics."""
    return sorted(table.changelog_topic.get_topic_name() for table in app.tables.values())


async def ensure_changelog_topics(settings: Settings, app: faust.App) -> None:
    """Create the changelog topics before the worker joins its group, like Reef's own
    topics: replicated (up to 3, min ISR 2), compacted, and visible in the metadata.

    Left to Faust they are created at replication 1 (a dead broker then holds a table
    partition hostage) and, on a fresh cluster, while the group leader may already be
    assigning without them (Faust ignores a missing topic; the worker then exits, see
    ``run``, and a static member is handed the same assignment again).
    """
    names = changelog_topics(app)
    log = KafkaLog(
        settings.kafka_bootstrap,
        partitions=settings.partitions,
        client_id=f"{app.conf.id}-setup",
        topic_configs={name: {"cleanup.policy": "compact"} for name in names},
    )
    await log.ensure_topics(names)


def _transaction_producers(producer: Any) -> dict[str, Any]:
    """The Faust aiokafka driver's transactional producers by transactional id."""
    found: dict[str, Any] = producer._transaction_producers
    return found


def create_app(settings: Settings, data_dir: Path) -> faust.App:
    """The worker's app; its id, groups and topics carry the deployment's topic prefix.

    ``data_dir`` holds the tables' RocksDB files: this worker's alone, and empty.
    """
    prefix = settings.kafka_topic_prefix
    options: dict[str, Any] = {}
    if settings.streams_instance_id:
        # static membership: a restarted worker gets its partitions back without waiting
        # for the session of its killed predecessor to expire (and without a rebalance)
        options["consumer_group_instance_id"] = settings.streams_instance_id
    app = faust.App(
        prefix + STREAMS_APP_ID,
        broker=f"kafka://{settings.kafka_bootstrap}",
        processing_guarantee="exactly_once",
        store="rocksdb://",
        datadir=str(data_dir),
        topic_partitions=settings.partitions,
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        topic_allow_declare=True,
        producer_acks=-1,
        broker_session_timeout=settings.streams_session_timeout_s,
        broker_heartbeat_interval=max(1.0, settings.streams_session_timeout_s / 3),
        **options,
    )
    # the consumer creates its transaction manager from the transport when it starts
    app.transport.TransactionManager = functools.partial(  # type: ignore[misc,assignment]
        ReefTransactionManager, commit_timeout_s=settings.streams_stall_timeout_s or None
    )
    codec = EventCodec()
    inputs: set[str] = set()
    for processor in processors(settings):
        _host(app, processor, codec, settings.partitions, prefix)
        inputs.update(prefix + topic for topic in processor.inputs)
    if settings.streams_stall_timeout_s:
        watchdog.install(
            app,
            settings.kafka_bootstrap,
            inputs,
            settings.streams_stall_timeout_s,
            _die,
        )
    return app


async def _send_in_transaction(
    app: faust.App,
    transactional_id: str,
    outputs: list[tuple[str, bytes, bytes, int, Any]],
    changelog: list[ChangelogRecord],
) -> None:
    """Send one event's outputs and changelog records in the open transaction, atomically.

    The lock is the one Faust's commit takes for this transactional id, so no commit can
    fall between two of these records. A failure leaves part of the event in the open
    transaction: the worker exits rather than let it commit.
    """
    producer: Any = app.producer
    lock = producer._trn_locks.get(transactional_id)
    if lock is None:
        _die(f"no transactional producer {transactional_id} for an assigned partition")
    try:
        async with lock:
            transactional = _transaction_producers(producer).get(transactional_id)
            if transactional is None:
                _die(f"transactional producer {transactional_id} is gone")
            for topic, key, value, partition, headers in outputs:
                await transactional.send(
                    topic, value, key=key, partition=partition, headers=headers
                )
            for record in changelog:
                await transactional.send(
                    record.topic, record.value, key=record.key, partition=record.partition
                )
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the transaction now holds part of an event
        _die(f"sending in transaction {transactional_id} failed", exc)


def _host(
    app: faust.App,
    processor: Processor,
    codec: EventCodec,
    partitions: int,
    prefix: str,
) -> None:
    source = app.topic(
        *(prefix + t for t in processor.inputs),
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
    )
    sink = prefix + processor.output
    app.topic(sink, key_serializer="raw", value_serializer="raw", partitions=partitions)
    table = app.Table(
        f"{processor.name}-state",
        default=None,
        partitions=partitions,
        key_type=str,
        options={"driver": "rocksdict", **ROCKSDB_OPTIONS},
    )
    state = TableState(table)
    changelog_topic = table.changelog_topic.get_topic_name()

    async def run(stream: Any) -> AsyncIterator[None]:
        async for event in stream.events():
            message = event.message
            if TP(changelog_topic, message.partition) not in app.consumer.assignment():
                # the table partition was never restored: an assignment computed while the
                # changelog topic was missing from the leader's metadata (Faust ignores it;
                # static members keep that assignment). Processing would run on empty state.
                _die(f"{changelog_topic} partition {message.partition} is not assigned")
            try:
                decoded = codec.decode(event.value)
            except Exception:
                logger.exception("%s: skipping undecodable record %s", processor.name, message.tp)
                yield None
                continue
            transaction = (
                f"{app.conf.id}-{app.assignor.group_for_topic(message.topic)}-{message.partition}"
            )
            outputs = []
            for output in processor.step(state, decoded):
                value, headers = codec.encode(output)
                outputs.append((sink, output.scenario.encode(), value, message.partition, headers))
            changelog = state.take_changelog()
            if outputs or changelog:
                # shielded: a cancelled agent (a stop) still puts the whole event in the
                # transaction, never a part of it; its offset is not acknowledged then
                await asyncio.shield(_send_in_transaction(app, transaction, outputs, changelog))
            yield None

    app.agent(source, name=f"reef-{processor.name}")(run)
