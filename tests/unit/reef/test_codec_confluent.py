"""EventCodec in the Confluent wire format: 00 + schema id + the single-object body.

Every codec reads both formats; ids it was not given at start-up are asked of a lookup
(the registry in a deployment, a dict here) once each. The registry itself is exercised
in tests/integration/test_wire_format.py.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest

from reef.codec import (
    HEADER_LEN,
    ID_HEADER_LEN,
    MAGIC,
    EventCodec,
    SchemaCatalogue,
    confluent_header,
    schema_dir,
    schema_fingerprint,
)
from reef.core.errors import ConfigError, CorruptRecordError, UnknownSchemaError
from reef.core.events import EVENT_TYPES, InferenceRecorded
from tests.support.golden import golden_events, golden_path

CATALOGUE = SchemaCatalogue.load()
#: ids as a registry would assign them: any numbers, here 1000 + the type's rank
IDS = {name: 1000 + i for i, name in enumerate(sorted(CATALOGUE.current_entries()))}
SINGLE = EventCodec(CATALOGUE)
CONFLUENT = EventCodec(CATALOGUE, schema_ids=IDS)
EVENTS = golden_events()
HISTORY = sorted((schema_dir() / "history").glob("*.avsc"))


@pytest.mark.parametrize("type_name", sorted(EVENT_TYPES))
def test_confluent_value_is_magic_zero_id_and_the_single_object_body(type_name: str) -> None:
    event = EVENTS[type_name]
    single, single_headers = SINGLE.encode(event)
    value, headers = CONFLUENT.encode(event)
    assert value[:1] == b"\x00"
    assert int.from_bytes(value[1:ID_HEADER_LEN], "big") == IDS[type_name]
    assert value[ID_HEADER_LEN:] == single[HEADER_LEN:]
    assert headers == single_headers  # event type and fingerprint headers, as before
    assert CONFLUENT.encode_reference(event)[0] == value  # fastavro's path: same bytes
    assert CONFLUENT.decode(value) == event == CONFLUENT.decode_reference(value)


@pytest.mark.parametrize("type_name", sorted(EVENT_TYPES))
def test_each_codec_reads_the_other_format(type_name: str) -> None:
    event = EVENTS[type_name]
    lookup = {IDS[type_name]: _raw(type_name)}
    single_reader = EventCodec(CATALOGUE, schema_by_id=lookup.get)
    assert single_reader.decode(CONFLUENT.encode(event)[0]) == event
    assert CONFLUENT.decode(SINGLE.encode(event)[0]) == event


@pytest.mark.parametrize("type_name", sorted(EVENT_TYPES))
def test_a_confluent_deployment_reads_the_golden_single_object_records(type_name: str) -> None:
    """Records written before a deployment switched (old writer schemas included)."""
    payload = golden_path(type_name).read_bytes()
    assert CONFLUENT.decode(payload) == SINGLE.decode(payload)


@pytest.mark.parametrize("path", HISTORY, ids=lambda p: p.stem)
def test_an_old_schema_id_is_asked_once_and_resolved_to_the_current_reader(path: Any) -> None:
    old_raw = json.loads(path.read_text())
    type_name = old_raw["name"]
    old_id = 7
    asked: list[int] = []

    def lookup(schema_id: int) -> dict[str, Any] | None:
        asked.append(schema_id)
        return old_raw if schema_id == old_id else None

    codec = EventCodec(CATALOGUE, schema_ids=IDS, schema_by_id=lookup)
    old_writer = CATALOGUE.writer(schema_fingerprint(old_raw))
    assert codec.writer_of_id(old_id) is old_writer
    # the golden event written under the old schema, in both formats
    event = EVENTS[type_name]
    body = io.BytesIO()
    record = {f["name"]: getattr(event, f["name"]) for f in old_raw["fields"]}
    fastavro.schemaless_writer(body, old_writer.schema, record)
    single = MAGIC + bytes.fromhex(old_writer.fingerprint) + body.getvalue()
    decoded = codec.decode(confluent_header(old_id) + body.getvalue())
    assert decoded == SINGLE.decode(single)
    assert decoded.type_name() == type_name
    codec.writer_of_id(old_id)
    assert asked == [old_id]  # cached after the first ask


def test_current_ids_are_never_asked() -> None:
    asked: list[int] = []

    def lookup(schema_id: int) -> dict[str, Any] | None:
        asked.append(schema_id)
        return None

    codec = EventCodec(CATALOGUE, schema_ids=IDS, schema_by_id=lookup)
    for event in EVENTS.values():
        assert codec.decode_reference(codec.encode(event)[0]) == event
    assert asked == []


def test_an_id_the_registry_does_not_know_is_unknown_schema() -> None:
    value = CONFLUENT.encode(EVENTS["InferenceRecorded"])[0]
    codec = EventCodec(CATALOGUE, schema_by_id=lambda _: None)
    with pytest.raises(UnknownSchemaError, match="no schema with id 1"):
        codec.decode(value)


def test_a_confluent_record_without_a_registry_is_unknown_schema() -> None:
    value = CONFLUENT.encode(EVENTS["InferenceRecorded"])[0]
    with pytest.raises(UnknownSchemaError, match="no schema registry"):
        SINGLE.decode(value)


def test_a_schema_unknown_to_reef_is_read_with_the_registry_s_copy() -> None:
    """A newer writer (a field Reef does not have yet) still resolves to today's reader."""
    newer = _raw("InferenceRecorded")
    newer["fields"] = [*newer["fields"], {"name": "added_later", "type": "long", "default": 0}]
    codec = EventCodec(CATALOGUE, schema_by_id={99: newer}.get)
    event = EVENTS["InferenceRecorded"]
    body = SINGLE.encode(event)[0][HEADER_LEN:] + b"\x54"  # added_later = 42
    decoded = codec.decode(confluent_header(99) + body)
    assert isinstance(decoded, InferenceRecorded)
    assert decoded == event


def test_garbage_after_a_known_id_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        CONFLUENT.decode(confluent_header(IDS["InferenceRecorded"]) + b"\xff\xff\xff")


def test_confluent_codec_needs_an_id_for_every_event_type() -> None:
    partial = dict(IDS)
    del partial["ReportSubmitted"]
    with pytest.raises(ConfigError, match="ReportSubmitted"):
        EventCodec(CATALOGUE, schema_ids=partial)


def _raw(type_name: str) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((schema_dir() / f"{type_name}.avsc").read_text())
    return raw
