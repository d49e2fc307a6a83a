"""EventCodec: single-object Avro round trips for every event type, and its failure modes.

Events are generated with hypothesis from the Avro schemas themselves (so a new field
is covered without touching this file), then built into the event dataclasses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import struct
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reef.codec import (
    EVENT_TYPE_HEADER,
    FINGERPRINT_HEADER,
    HEADER_LEN,
    MAGIC,
    EventCodec,
    SchemaCatalogue,
    schema_dir,
    schema_fingerprint,
)
from reef.core.errors import CorruptRecordError, EventValidationError, UnknownSchemaError
from reef.core.events import EVENT_TYPES, Event, InferenceRecorded, ReportRejected, utc_now

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

SCHEMA_FILES = sorted(schema_dir().glob("*.avsc"))
RAW_SCHEMAS: dict[str, dict[str, Any]] = {p.stem: json.loads(p.read_text()) for p in SCHEMA_FILES}

CODEC = EventCodec()

HYPOTHESIS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- strategies from Avro schemas ----------------------------------------------------


def _ms_datetimes() -> st.SearchStrategy[datetime]:
    return st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.just(UTC),
    ).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))


def avro_strategy(schema: Any) -> st.SearchStrategy[Any]:
    """Values valid for an Avro (JSON) schema, as the event dataclasses hold them."""
    if isinstance(schema, list):
        return st.one_of(*(avro_strategy(branch) for branch in schema))
    if isinstance(schema, str):
        schema = {"type": schema}
    kind = schema["type"]
    if isinstance(kind, (dict, list)):
        return avro_strategy(kind)
    logical = schema.get("logicalType")
    if kind == "long" and logical == "timestamp-millis":
        return _ms_datetimes()
    if logical is not None:
        raise AssertionError(f"no strategy for logical type {logical!r}; add one")
    simple: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": st.integers(INT_MIN, INT_MAX),
        "long": st.integers(LONG_MIN, LONG_MAX),
        "float": st.floats(allow_nan=False, allow_infinity=False, width=32),
        "double": st.floats(allow_nan=False, allow_infinity=False),
        "string": st.text(max_size=40),
        "bytes": st.binary(max_size=40),
    }
    if kind in simple:
        return simple[kind]
    if kind == "array":
        return st.lists(avro_strategy(schema["items"]), max_size=5)
    if kind == "map":
        return st.dictionaries(st.text(max_size=12), avro_strategy(schema["values"]), max_size=5)
    if kind == "record":
        return st.fixed_dictionaries(
            {f["name"]: avro_strategy(f["type"]) for f in schema["fields"]}
        )
    raise AssertionError(f"no strategy for Avro type {kind!r}; add one")


def event_strategy(type_name: str) -> st.SearchStrategy[Event]:
    cls = EVENT_TYPES[type_name]
    return avro_strategy(RAW_SCHEMAS[type_name]).map(lambda fields: cls(**fields))


def sample_event(type_name: str) -> Event:
    """A fixed, valid event of the type (first union branch that is not null)."""

    def value(schema: Any) -> Any:
        if isinstance(schema, list):
            return value(next(b for b in schema if b != "null"))
        if isinstance(schema, str):
            schema = {"type": schema}
        kind = schema["type"]
        if isinstance(kind, (dict, list)):
            return value(kind)
        if schema.get("logicalType") == "timestamp-millis":
            return datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
        if kind == "array" and schema["items"] != "string":
            return [value(schema["items"])] * 2
        return {
            "boolean": True,
            "int": 7,
            "long": 7_000_000_000,
            "float": 1.5,
            "double": 2.25,
            "string": "x",
            "bytes": b"x",
            "array": ["a", "b"],
            "map": {"k": "v"},
        }[kind]

    cls = EVENT_TYPES[type_name]
    return cls(**{f["name"]: value(f["type"]) for f in RAW_SCHEMAS[type_name]["fields"]})


ALL_TYPES = sorted(EVENT_TYPES)


# -- catalogue and dataclasses -----------------------------------------------------------


def test_every_event_type_has_exactly_one_schema() -> None:
    assert set(RAW_SCHEMAS) == set(EVENT_TYPES)
    for name, raw in RAW_SCHEMAS.items():
        assert raw["type"] == "record"
        assert raw["name"] == name
        assert raw["namespace"] == "reef.events"


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_dataclass_fields_equal_schema_fields(type_name: str) -> None:
    cls = EVENT_TYPES[type_name]
    dataclass_fields = [f.name for f in dataclasses.fields(cls)]
    schema_fields = [f["name"] for f in RAW_SCHEMAS[type_name]["fields"]]
    assert sorted(dataclass_fields) == sorted(schema_fields)
    assert len(set(schema_fields)) == len(schema_fields)
    assert schema_fields[:4] == ["event_id", "scenario", "occurred_at", "producer"]


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_dataclass_defaults_match_schema_defaults(type_name: str) -> None:
    """A reader filling a missing field uses the Avro default; the dataclass must agree."""
    cls = EVENT_TYPES[type_name]
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    for field in RAW_SCHEMAS[type_name]["fields"]:
        dc_field = by_name[field["name"]]
        if dc_field.default is not dataclasses.MISSING:
            dc_default: Any = dc_field.default
        elif dc_field.default_factory is not dataclasses.MISSING:
            dc_default = dc_field.default_factory()
        else:
            assert "default" not in field, f"{type_name}.{field['name']}: dataclass has no default"
            continue
        assert "default" in field, f"{type_name}.{field['name']}: schema has no default"
        assert dc_default == field["default"], f"{type_name}.{field['name']}"


def test_catalogue_knows_every_current_fingerprint() -> None:
    catalogue = SchemaCatalogue.load()
    for name, raw in RAW_SCHEMAS.items():
        entry = catalogue.current(name)
        assert entry.fingerprint == schema_fingerprint(raw)
        assert catalogue.writer(entry.fingerprint).event_type == name
    assert {schema_fingerprint(raw) for raw in RAW_SCHEMAS.values()} <= catalogue.fingerprints()


def _rabin_fingerprint(data: bytes) -> bytes:
    """CRC-64-AVRO exactly as the Avro specification writes it, little-endian bytes."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp & 0xFFFFFFFFFFFFFFFF)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return struct.pack("<Q", fp)


def test_fingerprint_is_the_spec_crc64_avro() -> None:
    # The example from the Avro specification's test suite: "int".
    assert schema_fingerprint("int") == "8f5c393f1ad57572"  # type: ignore[arg-type]
    from fastavro.schema import to_parsing_canonical_form

    for raw in RAW_SCHEMAS.values():
        canonical = to_parsing_canonical_form(raw).encode()
        assert bytes.fromhex(schema_fingerprint(raw)) == _rabin_fingerprint(canonical)


def test_fingerprint_ignores_docs_but_not_fields() -> None:
    raw = RAW_SCHEMAS["ReportRejected"]
    documented = json.loads(json.dumps(raw))
    documented["doc"] = "something else"
    assert schema_fingerprint(documented) == schema_fingerprint(raw)
    widened = json.loads(json.dumps(raw))
    widened["fields"].append({"name": "extra", "type": ["null", "string"], "default": None})
    assert schema_fingerprint(widened) != schema_fingerprint(raw)


# -- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("type_name", ALL_TYPES)
@HYPOTHESIS
@given(data=st.data())
def test_round_trip_every_type(type_name: str, data: st.DataObject) -> None:
    event = data.draw(event_strategy(type_name))
    payload, headers = CODEC.encode(event)
    fingerprint = CODEC.catalogue.current(type_name).fingerprint

    assert payload[:2] == MAGIC == b"\xc3\x01"
    assert payload[2:HEADER_LEN] == bytes.fromhex(fingerprint)
    assert dict(headers) == {
        EVENT_TYPE_HEADER: type_name.encode(),
        FINGERPRINT_HEADER: fingerprint.encode(),
    }
    assert [name for name, _ in headers] == [EVENT_TYPE_HEADER, FINGERPRINT_HEADER]

    decoded = CODEC.decode(payload)
    assert type(decoded) is type(event)
    assert decoded == event
    assert decoded.occurred_at.tzinfo is not None
    # encoding is a pure function of the event
    assert CODEC.encode(decoded) == (payload, headers)


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_round_trip_fixed_sample(type_name: str) -> None:
    event = sample_event(type_name)
    payload, headers = CODEC.encode(event)
    assert CODEC.decode(payload) == event
    assert (EVENT_TYPE_HEADER, type_name.encode()) in headers


def test_round_trip_edge_values() -> None:
    event = InferenceRecorded(
        event_id="é\u0000\U0001f600",
        scenario="日本語",
        occurred_at=datetime(1970, 1, 1, tzinfo=UTC),
        producer="",
        dialect="openai",
        route="/v1/chat/completions",
        release_id="r",
        stream=False,
        status=INT_MAX,
        complete=True,
        latency_ms=-0.0,
        upstream_latency_ms=1e308,
        input_tokens=LONG_MIN,
        output_tokens=LONG_MAX,
        tags={"": "", "ключ": "\U0001f600" * 100},
    )
    assert CODEC.decode(CODEC.encode(event)[0]) == event


def test_utc_now_is_millisecond_precise_and_round_trips() -> None:
    now = utc_now()
    assert now.microsecond % 1000 == 0
    assert now.tzinfo is not None
    event = dataclasses.replace(sample_event("ScenarioCreated"), occurred_at=now)
    assert CODEC.decode(CODEC.encode(event)[0]).occurred_at == now


def test_round_trip_with_catalogue_loaded_from_a_copy(tmp_path: Path) -> None:
    for path in SCHEMA_FILES:
        (tmp_path / path.name).write_text(path.read_text())
    codec = EventCodec(SchemaCatalogue.load(tmp_path))
    event = sample_event("EngineLoaded")
    payload, _ = codec.encode(event)
    assert payload == CODEC.encode(event)[0]
    assert CODEC.decode(payload) == event


# -- invalid events -------------------------------------------------------------------

WRONG_VALUES = [
    ("InferenceRecorded", "status", "200"),
    ("InferenceRecorded", "status", 2**31),
    ("InferenceRecorded", "stream", 1),
    ("InferenceRecorded", "latency_ms", "fast"),
    ("InferenceRecorded", "input_tokens", 2**63),
    ("InferenceRecorded", "tags", {"k": 1}),
    ("InferenceRecorded", "model", 5),
    ("ReportSubmitted", "references", "not-a-list"),
    ("ReportSubmitted", "references", ["ok", 3]),
    ("ReportSubmitted", "score", "high"),  # None is a report without a score
    ("EngineLoadFailed", "attempt", True),
    ("EngineLoadFailed", "attempt", 1.5),
    ("ScenarioCreated", "scenario", None),
    ("ScenarioCreated", "event_id", b"bytes"),
    ("ScenarioCreated", "occurred_at", "2024-01-01"),
]


@pytest.mark.parametrize(("type_name", "field", "bad"), WRONG_VALUES)
def test_wrong_typed_field_raises_naming_the_field(type_name: str, field: str, bad: Any) -> None:
    event = dataclasses.replace(sample_event(type_name), **{field: bad})
    with pytest.raises(EventValidationError) as info:
        CODEC.encode(event)
    assert info.value.field == field
    assert info.value.event_type == type_name
    assert f"{type_name}.{field}" in str(info.value)


@pytest.mark.parametrize("type_name", ALL_TYPES)
@HYPOTHESIS
@given(data=st.data())
def test_any_wrong_typed_field_is_rejected(type_name: str, data: st.DataObject) -> None:
    event = data.draw(event_strategy(type_name))
    fields = [f["name"] for f in RAW_SCHEMAS[type_name]["fields"]]
    field = data.draw(st.sampled_from(fields))
    # an object no Avro type accepts
    wrong: dict[str, Any] = {field: object()}
    event = dataclasses.replace(event, **wrong)
    with pytest.raises(EventValidationError) as info:
        CODEC.encode(event)
    assert info.value.field == field


def test_invalid_event_produces_nothing() -> None:
    """encode raises before returning any bytes; EventStore relies on this to write nothing."""
    good = sample_event("ReportRejected")
    wrong: dict[str, Any] = {"reason": 42}
    bad = dataclasses.replace(good, **wrong)
    result: tuple[bytes, Any] | None = None
    with pytest.raises(EventValidationError):
        result = CODEC.encode(bad)
    assert result is None


def test_event_without_schema_is_unknown() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class NotAnEvent(Event):
        pass

    thing = NotAnEvent(event_id="e", scenario="s", occurred_at=utc_now(), producer="p")
    with pytest.raises(UnknownSchemaError):
        CODEC.encode(thing)


# -- corrupt payloads -------------------------------------------------------------------


def _payload() -> bytes:
    event = ReportRejected(
        event_id="e1",
        scenario="s",
        occurred_at=datetime(2024, 1, 1, tzinfo=UTC),
        producer="p",
        report_id="r",
        reason="bad",
        detail="a detail long enough to truncate",
    )
    return CODEC.encode(event)[0]


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\xc3",
        b"\xc3\x01",
        b"\xc3\x01\x00\x00\x00",
        b"\x00\x01\x00",  # a Confluent magic byte without a whole schema id
        b"\x01\x00" + b"\x00" * 30,
        b"\xc3\x02" + b"\x00" * 30,
        b"garbage that is not avro at all",
        b'{"json": "not avro"}',
    ],
)
def test_bad_magic_or_short_header_is_corrupt(payload: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        CODEC.decode(payload)


def test_wrong_magic_on_a_valid_body_is_corrupt() -> None:
    payload = _payload()
    with pytest.raises(CorruptRecordError):
        CODEC.decode(b"\x01" + payload[1:])
    with pytest.raises(CorruptRecordError):
        CODEC.decode(payload[:1] + b"\x02" + payload[2:])


def test_every_truncation_of_the_body_is_corrupt() -> None:
    payload = _payload()
    for cut in range(HEADER_LEN, len(payload)):
        with pytest.raises(CorruptRecordError):
            CODEC.decode(payload[:cut])


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_truncated_body_of_every_type_is_corrupt(type_name: str) -> None:
    payload, _ = CODEC.encode(sample_event(type_name))
    for cut in (HEADER_LEN, HEADER_LEN + 1, len(payload) // 2, len(payload) - 1):
        with pytest.raises(CorruptRecordError):
            CODEC.decode(payload[:cut])


def test_unknown_fingerprint_is_unknown_schema() -> None:
    payload = _payload()
    forged = MAGIC + b"\x01\x02\x03\x04\x05\x06\x07\x08" + payload[HEADER_LEN:]
    with pytest.raises(UnknownSchemaError) as info:
        CODEC.decode(forged)
    assert "0102030405060708" in str(info.value)


def test_garbage_body_under_a_known_fingerprint_is_corrupt() -> None:
    header = _payload()[:HEADER_LEN]
    # a string length of -1 (zigzag 0x01) then nothing, and a huge length
    for body in (b"\x01", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x80"):
        with pytest.raises(CorruptRecordError):
            CODEC.decode(header + body)


@HYPOTHESIS
@given(body=st.binary(max_size=64))
def test_random_bodies_never_crash_the_decoder(body: bytes) -> None:
    """Any bytes after a known header decode to an event or raise a CodecError, nothing else."""
    header = _payload()[:HEADER_LEN]
    try:
        event = CODEC.decode(header + body)
    except (CorruptRecordError, UnknownSchemaError):
        return
    assert isinstance(event, ReportRejected)


@HYPOTHESIS
@given(payload=st.binary(max_size=64))
def test_random_payloads_never_crash_the_decoder(payload: bytes) -> None:
    with contextlib.suppress(CorruptRecordError, UnknownSchemaError):
        CODEC.decode(payload)
