"""``reef log tail`` as a user runs it: a subprocess printing JSON lines.

Undecodable records (garbage bytes, an unknown schema fingerprint, a truncated body)
are reported with their offset and an ``error``; the records after them still print.
On Kafka, Kafka's own console consumer shows the key and the ``reef-event-type``
header of the same records as text.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from reef.codec import EVENT_TYPE_HEADER, FINGERPRINT_HEADER, HEADER_LEN, MAGIC
from reef.core.events import InferenceRecorded
from reef.core.topics import ALL_TOPICS, INFERENCE
from reef.log.base import EventLog
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import KafkaLog
from reef.services.eventstore import EventStore

REEF = Path(sys.executable).with_name("reef")  # the console script of this environment


def inference(event_id: str, scenario: str) -> InferenceRecorded:
    return InferenceRecorded(
        event_id=event_id,
        scenario=scenario,
        occurred_at=datetime(2025, 6, 7, 8, 9, 10, 123000, tzinfo=UTC),
        producer="tail-test",
        dialect="openai",
        route="/v1/chat/completions",
        release_id="rel-1",
        stream=False,
        status=200,
        complete=True,
        latency_ms=12.5,
        upstream_latency_ms=10.0,
        request_json='{"messages": [{"role": "user", "content": "héllo"}]}',
        tags={"team": "ünï"},
    )


@dataclass
class Written:
    scenario: str
    first_id: str
    last_id: str
    count: int  # records of the scenario, in one partition, offsets 0..count-1


async def write_mixed_records(log: EventLog) -> Written:
    """Valid, garbage, unknown-fingerprint, truncated, valid - all under one key."""
    await log.ensure_topics(list(ALL_TOPICS))
    store = EventStore(log)
    scenario = f"tail-{uuid.uuid4().hex[:8]}"
    key = scenario.encode()
    first = inference("evt-first", scenario)
    last = inference("evt-last", scenario)
    good, headers = store.codec.encode(first)

    positions = [await store.append(first)]
    positions.append(await log.append(INFERENCE, key, b"this is not avro at all"))
    unknown = MAGIC + bytes.fromhex("0102030405060708") + good[HEADER_LEN:]
    positions.append(
        await log.append(INFERENCE, key, unknown, [(FINGERPRINT_HEADER, b"0102030405060708")])
    )
    positions.append(await log.append(INFERENCE, key, good[: len(good) - 5], headers))
    positions.append(await store.append(last))
    assert len({p.partition for p in positions}) == 1
    assert [p.offset for p in positions] == list(range(5))
    # another scenario's event, which --scenario leaves out
    await store.append(inference("evt-other", f"other-{uuid.uuid4().hex[:8]}"))
    return Written(scenario, first.event_id, last.event_id, len(positions))


def run_tail(*args: str, timeout: float = 60) -> list[dict[str, Any]]:
    assert REEF.is_file(), f"console script not found at {REEF}"
    result = subprocess.run(
        [str(REEF), "log", "tail", "--topic", INFERENCE, "--from-beginning", "--no-follow", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def check_lines(lines: list[dict[str, Any]], written: Written) -> None:
    mine = [line for line in lines if line["key"] == written.scenario]
    assert [line["offset"] for line in mine] == list(range(written.count))
    assert len({line["partition"] for line in mine}) == 1
    assert all(line["topic"] == INFERENCE for line in mine)
    first, garbage, unknown, truncated, last = mine

    assert "error" not in first and "error" not in last
    assert first["type"] == last["type"] == "InferenceRecorded"
    assert first["event"]["event_id"] == written.first_id
    assert last["event"]["event_id"] == written.last_id
    assert first["event"]["occurred_at"] == "2025-06-07T08:09:10.123000+00:00"
    assert first["event"]["tags"] == {"team": "ünï"}
    assert first["event"]["scenario"] == written.scenario

    for bad in (garbage, unknown, truncated):
        assert bad["error"], bad
        assert "event" not in bad and "type" not in bad
    assert "magic" in garbage["error"]
    assert "0102030405060708" in unknown["error"]
    assert "InferenceRecorded" in truncated["error"]


# -- embedded ------------------------------------------------------------------------


@pytest.fixture
async def embedded_state(tmp_path: Path) -> AsyncIterator[tuple[Path, Written]]:
    state = tmp_path / "state"
    log = EmbeddedLog(state / "log.sqlite3", partitions=6)
    await log.start()
    try:
        written = await write_mixed_records(log)
    finally:
        await log.close()
    yield state, written


async def test_tail_embedded_reports_bad_records_and_goes_on(
    embedded_state: tuple[Path, Written],
) -> None:
    state, written = embedded_state
    common = ("--log", "embedded", "--state-dir", str(state))
    everything = run_tail(*common)
    assert len(everything) == written.count + 1
    check_lines(everything, written)
    only_mine = run_tail(*common, "--scenario", written.scenario)
    assert len(only_mine) == written.count
    check_lines(only_mine, written)


def test_tail_embedded_without_from_beginning_prints_nothing(
    embedded_state: tuple[Path, Written],
) -> None:
    state, _ = embedded_state
    result = subprocess.run(
        [str(REEF), "log", "tail", "--topic", INFERENCE, "--no-follow",
         "--log", "embedded", "--state-dir", str(state)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


# -- Kafka -------------------------------------------------------------------------


@pytest.fixture
async def kafka_state(
    kafka_bootstrap: str, new_topic_name: Callable[..., str]
) -> AsyncIterator[tuple[str, Written]]:
    prefix = new_topic_name("tail") + "."
    log = KafkaLog(kafka_bootstrap, partitions=3, topic_prefix=prefix)
    await log.start()
    try:
        written = await write_mixed_records(log)
    finally:
        await log.close()
    yield prefix, written


@pytest.mark.kafka
async def test_tail_kafka_reports_bad_records_and_goes_on(
    kafka_bootstrap: str, kafka_state: tuple[str, Written]
) -> None:
    prefix, written = kafka_state
    common = ("--log", "kafka", "--kafka-bootstrap", kafka_bootstrap,
              "--kafka-topic-prefix", prefix)
    everything = run_tail(*common)
    assert len(everything) == written.count + 1
    check_lines(everything, written)
    check_lines(run_tail(*common, "--scenario", written.scenario), written)


@pytest.mark.kafka
def test_kafka_console_consumer_shows_key_and_headers(
    kafka_bootstrap: str, kafka_state: tuple[str, Written], tmp_path: Path
) -> None:
    from reef_dev.stack import kafka
    from reef_dev.stack.paths import load_settings

    prefix, written = kafka_state
    install = kafka.install_for(load_settings())
    command = [
        "java", "-Xmx256m",
        f"-Dlog4j2.configurationFile={install.log4j_config}",
        f"-Dkafka.logs.dir={tmp_path}",
        "-cp", install.classpath,
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server", kafka_bootstrap,
        "--topic", prefix + INFERENCE,
        "--from-beginning",
        "--max-messages", str(written.count + 1),
        "--timeout-ms", "30000",
        "--property", "print.key=true",
        "--property", "print.headers=true",
        "--property", "print.value=false",
        "--property", "key.separator=|",
    ]
    result = subprocess.run(command, capture_output=True, timeout=90)
    stdout = result.stdout.decode("utf-8", errors="replace")
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert len(lines) == written.count + 1, stdout

    mine = [line for line in lines if line.endswith("|" + written.scenario)]
    assert len(mine) == written.count, stdout
    valid = [line for line in mine if f"{EVENT_TYPE_HEADER}:InferenceRecorded" in line]
    assert len(valid) == 3  # first, truncated (it kept the headers) and last
    assert all(f"{FINGERPRINT_HEADER}:" in line for line in valid)
    assert sum("NO_HEADERS" in line for line in mine) == 1  # the garbage record
