"""``reef.history`` on both logs: sealed bodies opened with keys from ``reef.keys``, an
erased record marked (never an error), a claim-checked body fetched from the artifact
store (and marked ``unavailable`` once its object is gone), an undecodable record raised
or skipped, a time window, several topics followed together, Arrow tables.

The records are appended through the event store as ``reef serve`` appends them (sealed,
keys in the same append, large bodies claim-checked) on the embedded log in a temporary
directory or on Kafka under a topic prefix of its own.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reef.artifacts import ClaimCheck, LocalArtifactStore, open_store
from reef.artifacts.claimcheck import parse_ref
from reef.core.events import InferenceRecorded, RecordErased
from reef.core.topics import INFERENCE, LOG_TOPICS, REPORTS
from reef.history import (
    StreamRecord,
    UndecodableRecordError,
    arrow_batches,
    open_stream,
    read_tables,
    readable_store,
    to_arrow,
)
from reef.history.export import write_parquet
from reef.log import open_log, running
from reef.log.kafka import delete_prefixed_topics
from reef.services.eventstore import EventStore
from reef.settings import Settings
from reef_dev.events import inference, receipt, report

T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


@dataclass
class History:
    settings: Settings
    scenario: str
    small: str  #: receipt of an exchange kept inline
    large: str  #: receipt of an exchange whose request is claim-checked
    erased: str  #: receipt of an erased exchange
    garbage_offset: int  #: offset of the undecodable record (the scenario's partition)
    marker: str  #: in the large request


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
async def settings(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Settings]:
    base = Settings.of(state_dir=tmp_path, partitions=2, claim_check_bytes=1024)
    if request.param == "embedded":
        yield base
        return
    bootstrap: str = request.getfixturevalue("kafka_bootstrap")
    prefix = f"t-stream-{uuid.uuid4().hex[:10]}-"
    yield base.replace(log="kafka", kafka_bootstrap=bootstrap, kafka_topic_prefix=prefix)
    await delete_prefixed_topics(bootstrap, prefix)


@pytest.fixture
async def history(settings: Settings) -> History:
    scenario = f"stream-{uuid.uuid4().hex[:8]}"
    small, large, erased = (receipt(scenario, n) for n in range(3))
    marker = f"marker-{uuid.uuid4().hex}"
    # over the claim-check threshold even compressed before sealing: no filler repeats
    filler = "".join(uuid.uuid4().hex for _ in range(80))
    big = {"model": "m", "messages": [{"role": "user", "content": f"{marker} {filler}"}]}
    claims = ClaimCheck(open_store(settings), settings.artifacts.claim_check_bytes)
    async with running(open_log(settings)) as log, readable_store(log, claims) as store:
        await log.ensure_topics(list(LOG_TOPICS))
        events = [
            inference(scenario, small, T0),
            inference(scenario, large, T0 + timedelta(minutes=1), request=big),
            inference(scenario, erased, T0 + timedelta(minutes=2)),
        ]
        await store.append_all([replace(e, input_tokens=3, output_tokens=5) for e in events])
        await store.erase(scenario, erased, producer="test")
        garbage = await log.append(INFERENCE, scenario.encode(), b"not a Reef event")
        await store.append(report(scenario, "r1", [small], T0 + timedelta(minutes=3)))
    return History(settings, scenario, small, large, erased, garbage.offset, marker)


async def records(history: History, **options: object) -> list[StreamRecord]:
    async with open_stream(
        history.settings,
        INFERENCE,
        scenario=history.scenario,
        **options,  # type: ignore[arg-type]
    ) as stream:
        return [r async for r in stream]


async def test_sealed_bodies_open_erased_ones_are_marked(history: History) -> None:
    found = await records(history, undecodable="skip")
    by_id = {r.event.event_id: r for r in found if isinstance(r.event, InferenceRecorded)}
    assert set(by_id) == {history.small, history.large, history.erased}

    small, large, erased = by_id[history.small], by_id[history.large], by_id[history.erased]
    assert not small.erased and small.unavailable is None
    assert isinstance(small.event, InferenceRecorded) and small.event.request_json is not None
    assert history.small in small.event.request_json  # opened with its key
    assert small.event.request_sealed is None and small.event.response_json is not None
    # claim-checked: fetched from the artifact store and opened
    assert isinstance(large.event, InferenceRecorded) and large.event.request_json is not None
    assert history.marker in large.event.request_json and large.event.request_ref is None
    # erased: marked, no content, the metadata stays
    assert erased.erased and isinstance(erased.event, InferenceRecorded)
    assert erased.event.request_json is None and erased.event.response_json is None
    assert erased.event.request_sealed is None and erased.event.input_tokens == 3
    (announced,) = [r for r in found if isinstance(r.event, RecordErased)]
    assert announced.event.record_id == history.erased  # type: ignore[attr-defined]
    assert all((r.topic, r.partition) == (INFERENCE, small.partition) for r in found)
    assert sorted(r.offset for r in found) == [r.offset for r in found]


async def test_an_undecodable_record_raises_or_is_skipped_and_listed(history: History) -> None:
    with pytest.raises(UndecodableRecordError) as raised:
        await records(history)
    assert (raised.value.topic, raised.value.offset) == (INFERENCE, history.garbage_offset)
    assert "bad magic" in str(raised.value)

    async with open_stream(
        history.settings, INFERENCE, scenario=history.scenario, undecodable="skip"
    ) as stream:
        kept = [r async for r in stream]
    assert len(kept) == 4  # three exchanges and the RecordErased
    ((topic, _, offset, reason),) = [
        (s.topic, s.partition, s.offset, s.reason) for s in stream.skipped
    ]
    assert (topic, offset) == (INFERENCE, history.garbage_offset) and "bad magic" in reason


async def test_a_missing_claim_checked_object_leaves_the_rest_readable(history: History) -> None:
    (large,) = [r for r in await records(history, undecodable="skip") if _is(r, history.large)]
    assert isinstance(large.event, InferenceRecorded)
    ref = await _stored_request_ref(history)
    LocalArtifactStore.in_state_dir(history.settings.deployment.state_dir).object_path(
        parse_ref(ref)
    ).unlink()

    (again,) = [r for r in await records(history, undecodable="skip") if _is(r, history.large)]
    assert isinstance(again.event, InferenceRecorded)
    assert again.unavailable is not None and "not found" in again.unavailable
    assert again.event.request_json is None and again.event.request_ref == ref
    assert again.event.response_json == large.event.response_json  # the inline body opened
    assert not again.erased and again.event.input_tokens == 3


def _is(record: StreamRecord, event_id: str) -> bool:
    return record.event.event_id == event_id


async def _stored_request_ref(history: History) -> str:
    """The large exchange's claim-check reference, as stored (sealed, no key needed)."""
    async with running(open_log(history.settings)) as log:
        async for stored in EventStore(log).read(INFERENCE, scenario=history.scenario):
            event = stored.event
            if isinstance(event, InferenceRecorded) and event.event_id == history.large:
                assert event.request_ref is not None and event.sealed
                return event.request_ref
    raise AssertionError("the large exchange is not in the log")


async def test_since_and_until_keep_a_window(history: History) -> None:
    window = await records(
        history,
        since=T0 + timedelta(seconds=30),
        until=T0 + timedelta(minutes=2),
        undecodable="skip",
    )
    assert [r.event.event_id for r in window] == [history.large]


async def test_follow_reads_several_topics_together(history: History) -> None:
    async with running(open_log(history.settings)) as log:
        ends = {t: await log.end_offsets(t) for t in (INFERENCE, REPORTS)}
    late = receipt(history.scenario, 9)
    async with open_stream(
        history.settings, [INFERENCE, REPORTS], follow=True, start=ends
    ) as stream:
        seen: list[StreamRecord] = []

        async def collect() -> None:
            async for record in stream:
                seen.append(record)
                if len(seen) == 2:
                    return

        task = asyncio.create_task(collect())
        async with running(open_log(history.settings)) as log, readable_store(log) as store:
            await store.append(report(history.scenario, "r-late", [late], T0))
            await store.append(inference(history.scenario, late, T0))
        await asyncio.wait_for(task, 30)
    assert {(r.topic, r.event.event_id) for r in seen} == {(REPORTS, "r-late"), (INFERENCE, late)}
    (exchange,) = [r for r in seen if isinstance(r.event, InferenceRecorded)]
    assert isinstance(exchange.event, InferenceRecorded)
    assert exchange.event.request_json is not None and late in exchange.event.request_json


async def test_arrow_tables_and_the_export_of_the_same_records(
    history: History, tmp_path: Path
) -> None:
    tables = await read_tables(
        history.settings, [INFERENCE, REPORTS], scenario=history.scenario, undecodable="skip"
    )
    inference_table = tables[INFERENCE]
    assert inference_table.num_rows == 4 and tables[REPORTS].num_rows == 1
    assert inference_table.schema.field("occurred_at").type == pa.timestamp("us", tz="UTC")
    assert inference_table.schema.field("input_tokens").type == pa.int64()
    assert inference_table.schema.field("tags").type == pa.string()  # JSON text
    rows = {r["event_id"]: r for r in inference_table.to_pylist()}
    assert rows[history.erased]["erased"] is True and rows[history.erased]["request_json"] is None
    assert rows[history.small]["erased"] is False
    assert json.loads(rows[history.large]["request_json"])["messages"][0]["content"].startswith(
        history.marker
    )
    assert rows[history.small]["occurred_at"] == T0
    assert json.loads(rows[history.small]["tags"]) == {}
    assert rows[history.erased]["input_tokens"] == 3

    # in batches of a bounded size, each with the topic's schema
    async with open_stream(
        history.settings, INFERENCE, scenario=history.scenario, undecodable="skip"
    ) as stream:
        batches = [b async for b in arrow_batches(stream, INFERENCE, rows=3)]
    assert [b.num_rows for b in batches] == [3, 1]
    assert all(b.schema == inference_table.schema for b in batches)
    assert pa.Table.from_batches(batches).equals(inference_table)

    # reef export's Parquet: the same rows less the erased exchange, no reader's marks
    output = tmp_path / "inference.parquet"
    async with open_stream(
        history.settings, INFERENCE, scenario=history.scenario, undecodable="skip"
    ) as stream:
        written = await write_parquet(stream, INFERENCE, output, rows=2)
    exported = pq.read_table(output)
    assert written == exported.num_rows == 3
    assert "erased" not in exported.column_names and "unavailable" not in exported.column_names
    assert history.erased not in exported.column("event_id").to_pylist()
    assert exported.schema.field("occurred_at").type == pa.timestamp("us", tz="UTC")


def test_to_arrow_refuses_a_record_of_another_topic(tmp_path: Path) -> None:
    event = inference("s", receipt("s", 1), T0)
    assert to_arrow([], INFERENCE).num_rows == 0
    with pytest.raises(ValueError, match="a record of reef\\.inference"):
        to_arrow([StreamRecord(INFERENCE, 0, 0, event)], REPORTS)
