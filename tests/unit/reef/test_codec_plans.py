"""The codec's compiled plans (reef.avro_plan) against its fastavro reference path.

The plans are a fast path only: for every event they accept they must write the bytes
fastavro writes, for every payload they accept they must read the event fastavro reads,
and whatever the reference path refuses (a value ``validate`` rejects, a corrupt payload)
they must decline, so the codec's results and errors stay the reference path's.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reef.avro_plan import DECLINED, LONG_MAX, LONG_MIN, RecordPlan, record_plan
from reef.codec import HEADER_LEN, MAGIC, EventCodec, event_builder, schema_dir
from reef.core.errors import CorruptRecordError, EventValidationError
from reef.core.events import EVENT_TYPES, Event, ReportRejected

RAW = {p.stem: json.loads(p.read_text()) for p in sorted(schema_dir().glob("*.avsc"))}
CODEC = EventCodec()
ALL_TYPES = sorted(EVENT_TYPES)
CHECKS = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _plan(type_name: str) -> RecordPlan:
    plan = record_plan(CODEC.catalogue.current(type_name).schema)
    assert plan is not None, f"{type_name}: no plan (a new Avro type? teach reef.avro_plan)"
    return plan


def _prefix(type_name: str) -> bytes:
    return MAGIC + bytes.fromhex(CODEC.catalogue.current(type_name).fingerprint)


def _values(schema: Any) -> st.SearchStrategy[Any]:
    """Values the reference path accepts, including non-UTC zones and sub-ms times."""
    if isinstance(schema, list):
        return st.one_of(*(_values(branch) for branch in schema))
    if isinstance(schema, str):
        schema = {"type": schema}
    kind = schema["type"]
    if isinstance(kind, (dict, list)):
        return _values(kind)
    if schema.get("logicalType") == "timestamp-millis":
        zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone.min])
        return st.datetimes(
            min_value=datetime(1, 1, 3), max_value=datetime(9999, 12, 29), timezones=zones
        )
    simple: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(LONG_MIN, LONG_MAX),
        "double": st.floats(allow_nan=False),
        "string": st.text(max_size=90),
        "bytes": st.binary(max_size=90),
    }
    if kind in simple:
        return simple[kind]
    if kind == "array":
        return st.lists(_values(schema["items"]), max_size=70)
    if kind == "map":
        return st.dictionaries(st.text(max_size=12), _values(schema["values"]), max_size=70)
    raise AssertionError(f"no strategy for Avro type {kind!r}; add one")


def _events(type_name: str) -> st.SearchStrategy[Event]:
    fields = {f["name"]: _values(f["type"]) for f in RAW[type_name]["fields"]}
    return st.fixed_dictionaries(fields).map(lambda kw: EVENT_TYPES[type_name](**kw))


def _sample(type_name: str) -> Event:
    """A fixed valid event: the first non-null branch of each field, plainly filled."""

    def value(schema: Any) -> Any:
        if isinstance(schema, list):
            return value(next(b for b in schema if b != "null"))
        if isinstance(schema, dict):
            if schema.get("logicalType") == "timestamp-millis":
                return datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
            if schema["type"] in ("array", "map"):
                return ["a", "b"] if schema["type"] == "array" else {"k": "v"}
            return value(schema["type"])
        plain = {"boolean": True, "int": 7, "long": 2**40, "double": 2.25}
        return plain.get(schema, b"x" if schema == "bytes" else "x")

    fields = {f["name"]: value(f["type"]) for f in RAW[type_name]["fields"]}
    return EVENT_TYPES[type_name](**fields)


def _outcome(call: Any, *args: Any) -> Any:
    """What a call returns, or the type of what it raises."""
    try:
        return call(*args)
    except Exception as exc:  # the outcome under comparison
        return type(exc)


@pytest.mark.parametrize("type_name", ALL_TYPES)
@CHECKS
@given(data=st.data())
def test_plan_writes_and_reads_what_fastavro_does(type_name: str, data: st.DataObject) -> None:
    event = data.draw(_events(type_name))
    plan = _plan(type_name)
    reference, headers = CODEC.encode_reference(event)

    body = plan.write(event)  # plain values: never declined
    assert _prefix(type_name) + body == reference
    assert CODEC.encode(event) == (reference, headers)

    values = plan.read(body)  # a well-formed body: never declined
    reference_event = CODEC.decode_reference(reference)
    assert values == [getattr(reference_event, name) for name in plan.names]
    decoded = CODEC.decode(reference)
    assert type(decoded) is type(event)
    assert decoded == CODEC.decode_reference(reference)


@pytest.mark.parametrize("type_name", ALL_TYPES)
@CHECKS
@given(data=st.data())
def test_a_damaged_payload_decodes_as_the_reference_decodes(
    type_name: str, data: st.DataObject
) -> None:
    """Flipped, cut or spliced bytes: the same event or the same error either way."""
    payload = bytearray(CODEC.encode(data.draw(_events(type_name)))[0])
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(HEADER_LEN, max(HEADER_LEN, len(payload) - 1)))
        edit = data.draw(st.sampled_from(["flip", "cut", "insert", "truncate"]))
        byte = data.draw(st.integers(0, 255))
        if edit == "flip" and at < len(payload):
            payload[at] = byte
        elif edit == "cut":
            del payload[at : at + 1]
        elif edit == "insert":
            payload.insert(at, byte)
        else:
            del payload[at:]
    damaged = bytes(payload)
    expected = _outcome(CODEC.decode_reference, damaged)
    assert _outcome(CODEC.decode, damaged) == expected


#: values of every Python type a caller might pass, valid for some Avro type or none
ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**31,
    -(2**31) - 1,
    2**63,
    LONG_MIN - 1,
    1.5,
    float("nan"),
    "text",
    b"raw",
    bytearray(b"raw"),
    [],
    ["a"],
    ["a", 1],
    ("a",),
    {"k": "v"},
    {"k": 1},
    {1: "v"},
    datetime(2024, 1, 1, 12, 0, 0, 123456),  # naive
    datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC),
    object(),
]


class _Text(str):
    __slots__ = ()


class _Count(int):
    pass


ODD_VALUES += [_Text("sub"), _Count(3), [_Text("sub")], {"k": _Text("v")}]


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_a_plan_accepts_only_what_validation_accepts(type_name: str) -> None:
    """Any field, any odd value: the plan declines, or writes the reference's bytes."""
    plan = _plan(type_name)
    base = _sample(type_name)
    for field in RAW[type_name]["fields"]:
        for odd in ODD_VALUES:
            event = dataclasses.replace(base, **{field["name"]: odd})
            reference = _outcome(CODEC.encode_reference, event)
            try:
                body = plan.write(event)
            except DECLINED:
                assert _outcome(CODEC.encode, event) == reference
                continue
            assert reference is not EventValidationError, (field["name"], odd)
            assert _prefix(type_name) + body == reference[0], (field["name"], odd)


def test_an_invalid_event_is_still_refused_before_any_bytes() -> None:
    event = ReportRejected(
        event_id="e",
        scenario="s",
        occurred_at=datetime(2024, 1, 1, tzinfo=UTC),
        producer="p",
        report_id="r",
        reason="x" * 100,
        detail=None,
    )
    with pytest.raises(EventValidationError) as info:
        CODEC.encode(dataclasses.replace(event, detail=7))  # type: ignore[arg-type]
    assert info.value.field == "detail"


def test_a_corrupt_body_is_still_a_corrupt_record() -> None:
    payload = CODEC.encode(_sample("ReportRejected"))[0]
    with pytest.raises(CorruptRecordError):
        CODEC.decode(payload[:HEADER_LEN] + b"\x03")


def test_the_builder_calls_the_constructor_of_a_class_with_post_init() -> None:
    seen: list[str] = []

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Checked(Event):
        note: str

        def __post_init__(self) -> None:
            seen.append(self.note)

    names = ("event_id", "scenario", "occurred_at", "producer", "note")
    at = datetime(2024, 1, 1, tzinfo=UTC)
    built = event_builder(Checked, names)(["e", "s", at, "p", "n"])
    assert built == Checked(event_id="e", scenario="s", occurred_at=at, producer="p", note="n")
    assert seen == ["n", "n"]


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_the_builder_builds_what_the_constructor_builds(type_name: str) -> None:
    event = _sample(type_name)
    names = _plan(type_name).names
    values = [getattr(event, name) for name in names]
    built = event_builder(EVENT_TYPES[type_name], names)(values)
    assert type(built) is type(event)
    assert built == event
    assert repr(built) == repr(event)


@pytest.mark.parametrize("size", [0, 63, 64, 8191, 8192, 70_000])
def test_strings_of_every_length_form_read_as_fastavro_reads(size: int) -> None:
    """Lengths of one, two and three varint bytes (the reader inlines the first two)."""
    sample = _sample("ReportRejected")
    assert isinstance(sample, ReportRejected)
    event = dataclasses.replace(sample, reason="r" * size, detail="é" * size)
    payload = CODEC.encode(event)[0]
    assert payload == CODEC.encode_reference(event)[0]
    assert CODEC.decode(payload) == CODEC.decode_reference(payload) == event


@pytest.mark.parametrize(
    "length", [b"\x01", b"\x81\x01", b"\x85\x80\x00", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f"]
)
def test_a_negative_or_huge_string_length_decodes_as_the_reference_decodes(
    length: bytes,
) -> None:
    payload = CODEC.encode(_sample("ReportRejected"))[0]
    first = payload[HEADER_LEN]  # event_id "x": length byte 2, then b"x"
    assert first == 2
    damaged = payload[:HEADER_LEN] + length + payload[HEADER_LEN + 1 :]
    assert _outcome(CODEC.decode, damaged) == _outcome(CODEC.decode_reference, damaged)
