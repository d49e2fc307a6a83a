"""A deployment switches wire format and its older records stay readable, by every reader.

An embedded log gets single-object records, then the deployment switches to
``wire_format: confluent`` (``reef topics create --schema-registry-url`` registers the
schemas) and writes more; ``reef log tail`` and ``reef export``, run as a user runs them,
read both kinds (the Confluent ones by the registry's ids). A confluent deployment that
cannot get its ids stops at start-up naming the command that registers them.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reef.codec import ID_HEADER_LEN, MAGIC
from reef.core.errors import ConfigError
from reef.core.events import InferenceRecorded
from reef.core.topics import INFERENCE, LOG_TOPICS
from reef.log.embedded import EmbeddedLog
from reef.log.wire_format import open_codec
from reef.services.eventstore import EventStore
from reef.settings import Settings

REEF = Path(sys.executable).with_name("reef")  # the console script of this environment


def exchange(event_id: str, scenario: str) -> InferenceRecorded:
    return InferenceRecorded(
        event_id=event_id,
        scenario=scenario,
        occurred_at=datetime(2025, 6, 7, 8, 9, 10, tzinfo=UTC),
        producer="wire-test",
        dialect="openai",
        route="/v1/chat/completions",
        release_id="rel-1",
        stream=False,
        status=200,
        complete=True,
        latency_ms=1.5,
        upstream_latency_ms=1.0,
        request_json='{"messages": []}',
    )


def reef(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REEF), *args], capture_output=True, text=True, timeout=120, check=False
    )


async def write_then_switch(state: Path, registry_url: str, scenario: str) -> list[bytes]:
    """Two single-object records, the switch, two Confluent ones; the values written."""
    log = EmbeddedLog(state / "log.sqlite3")
    await log.start()
    try:
        await log.ensure_topics(list(LOG_TOPICS))
        await EventStore(log).append_all([exchange(f"so-{i}", scenario) for i in range(2)])
        created = reef(
            "topics", "create", "--state-dir", str(state), "--schema-registry-url", registry_url
        )
        assert created.returncode == 0, created.stderr
        settings = Settings.of(schema_registry_url=registry_url, wire_format="confluent")
        confluent = EventStore(log, open_codec(settings))
        await confluent.append_all([exchange(f"cf-{i}", scenario) for i in range(2)])
        return [record.value async for record in log.read(INFERENCE)]
    finally:
        await log.close()


def test_a_switched_deployment_reads_both_formats_in_tail_and_export(
    tmp_path: Path, schema_registry_url: str
) -> None:
    state, scenario = tmp_path / "state", f"wire-{uuid.uuid4().hex[:8]}"
    values = asyncio.run(write_then_switch(state, schema_registry_url, scenario))
    assert sorted(v[:2] == MAGIC for v in values) == [False, False, True, True]
    assert sum(v[:1] == b"\x00" and len(v) > ID_HEADER_LEN for v in values) == 2
    ids = {"so-0", "so-1", "cf-0", "cf-1"}
    flags = ["--state-dir", str(state), "--schema-registry-url", schema_registry_url]

    tail = reef("log", "tail", "--topic", INFERENCE, "--from-beginning", "--no-follow", *flags)
    assert tail.returncode == 0, tail.stderr
    lines = [json.loads(line) for line in tail.stdout.splitlines()]
    assert {line["event"]["event_id"] for line in lines} == ids, lines

    out = tmp_path / "export.jsonl"
    exported = reef("export", "--topic", INFERENCE, "-o", str(out), *flags)
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {row["event_id"] for row in rows} == ids

    # without the registry, the Confluent records cannot be read, and tail says why
    blind = reef(
        "log",
        "tail",
        "--topic",
        INFERENCE,
        "--from-beginning",
        "--no-follow",
        "--state-dir",
        str(state),
    )
    errors = [json.loads(line).get("error") for line in blind.stdout.splitlines()]
    assert sum(e is None for e in errors) == 2
    assert sum("no schema registry" in (e or "") for e in errors) == 2, errors


def test_a_confluent_deployment_without_its_subjects_stops_naming_the_command(
    schema_registry_url: str,
) -> None:
    prefix = f"never-registered-{uuid.uuid4().hex[:8]}."
    settings = Settings.of(
        schema_registry_url=schema_registry_url, wire_format="confluent", kafka_topic_prefix=prefix
    )
    with pytest.raises(ConfigError, match="reef topics create --schema-registry-url"):
        open_codec(settings)


def test_a_confluent_deployment_needs_a_registry() -> None:
    with pytest.raises(ConfigError, match="needs a schema registry"):
        open_codec(Settings.of(wire_format="confluent"))


def test_a_command_refuses_confluent_without_a_registry(tmp_path: Path) -> None:
    """The check runs where a process opens its codec, before it reads or writes."""
    replayed = reef("replay", "--state-dir", str(tmp_path / "state"), "--wire-format", "confluent")
    assert replayed.returncode != 0
    assert "needs a schema registry" in replayed.stderr
