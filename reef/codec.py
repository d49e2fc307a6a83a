"""Avro encoding of events in either wire format, with a fingerprint catalogue.

A value is the Avro binary body of the event behind one of two headers:

* single-object (Avro specification, "Single object encoding"; the default): ``C3 01``
  + 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing
  Canonical Form. Readers look the fingerprint up in the catalogue (current schemas
  plus every superseded version kept in ``schemas/history``);
* Confluent (a deployment's ``wire_format: confluent``): ``00`` + the 4-byte big-endian
  id a schema registry assigned to the writer schema. Readers map the id to its schema
  (the current schemas' ids are given at start-up; any other id is asked of the
  registry once, through ``schema_by_id``, and cached) and that schema to its catalogue
  entry by fingerprint.

Every codec reads both headers, whichever it writes: a deployment can switch formats and
its older records stay readable. The writer schema is then resolved to the current
reader schema of the same event type.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MemberDescriptorType
from typing import Any, Final

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form
from fastavro.validation import validate

from reef.avro_plan import DECLINED, RecordPlan, record_plan
from reef.core.errors import (
    ConfigError,
    CorruptRecordError,
    EventValidationError,
    UnknownSchemaError,
)
from reef.core.events import EVENT_TYPES, Event

MAGIC: Final = b"\xc3\x01"
HEADER_LEN: Final = 10
#: the Confluent wire format: magic byte 0, then the registry's schema id (big-endian)
CONFLUENT_MAGIC: Final = b"\x00"
ID_HEADER_LEN: Final = 5
EVENT_TYPE_HEADER: Final = "reef-event-type"
FINGERPRINT_HEADER: Final = "reef-schema-fingerprint"

Headers = list[tuple[str, bytes]]
#: the registry's schema (parsed JSON) of a schema id; None when it has no such id
SchemaById = Callable[[int], dict[str, Any] | None]


def schema_dir() -> Path:
    """Where the ``.avsc`` files are: the checkout's ``schemas/`` or the wheel's copy."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "schemas", here / "_schemas"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("schemas/ not found next to the reef package")


def schema_fingerprint(schema: dict[str, Any]) -> str:
    """CRC-64-AVRO fingerprint of the canonical form, as 16 hex chars (little-endian bytes)."""
    return str(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


@dataclass(frozen=True, slots=True)
class SchemaEntry:
    event_type: str
    fingerprint: str
    schema: dict[str, Any]  # parsed by fastavro


class SchemaCatalogue:
    """Fingerprint → writer schema, and event type → current (reader) schema."""

    def __init__(
        self, current: Mapping[str, dict[str, Any]], history: list[dict[str, Any]]
    ) -> None:
        self._current: dict[str, SchemaEntry] = {}
        self._by_fingerprint: dict[str, SchemaEntry] = {}
        for raw in history:
            entry = _entry(raw)
            self._by_fingerprint[entry.fingerprint] = entry
        for name, raw in current.items():  # one entry object: decode tests ``writer is reader``
            entry = _entry(raw)
            self._current[name] = self._by_fingerprint[entry.fingerprint] = entry

    @classmethod
    def load(cls, directory: Path | None = None) -> SchemaCatalogue:
        root = directory or schema_dir()
        current = {p.stem: json.loads(p.read_text()) for p in sorted(root.glob("*.avsc"))}
        history = [json.loads(p.read_text()) for p in sorted((root / "history").glob("*.avsc"))]
        return cls(current, history)

    def current(self, event_type: str) -> SchemaEntry:
        try:
            return self._current[event_type]
        except KeyError:
            raise UnknownSchemaError(f"no schema for event type {event_type!r}") from None

    def writer(self, fp: str) -> SchemaEntry:
        try:
            return self._by_fingerprint[fp]
        except KeyError:
            raise UnknownSchemaError(f"unknown schema fingerprint {fp}") from None

    def resolve(self, raw: dict[str, Any]) -> SchemaEntry:
        """The catalogue's entry of a schema given in full (one a registry holds): the
        same canonical form is the same entry; an unknown one is parsed as it is."""
        return self._by_fingerprint.get(schema_fingerprint(raw)) or _entry(raw)

    def fingerprints(self) -> set[str]:
        return set(self._by_fingerprint)

    def current_entries(self) -> dict[str, SchemaEntry]:
        """Event type -> its current schema entry."""
        return dict(self._current)


def _entry(raw: dict[str, Any]) -> SchemaEntry:
    name = raw["name"]
    # parsed with its hint: fastavro then skips parsing the schema again on every read
    parsed = fastavro.parse_schema(raw)
    assert isinstance(parsed, dict)
    return SchemaEntry(name, schema_fingerprint(raw), parsed)


class EventCodec:
    """Encodes events to Avro bytes plus Kafka headers, and back (either wire format).

    ``schema_ids`` (event type -> the registry id of its current schema, for every type)
    makes the codec write the Confluent format; without it, it writes single-object.
    ``schema_by_id`` resolves any other id a record carries (None: such a record is an
    :class:`UnknownSchemaError`).

    Each current schema has a compiled :class:`reef.avro_plan.RecordPlan`: the fast path
    for events of plain values and well-formed payloads. What a plan declines takes the
    reference path (``fastavro.validation.validate``, then fastavro's writer; fastavro's
    reader), so both give the same bytes, events and errors (pinned by tests).
    """

    def __init__(
        self,
        catalogue: SchemaCatalogue | None = None,
        *,
        schema_ids: Mapping[str, int] | None = None,
        schema_by_id: SchemaById | None = None,
    ) -> None:
        self.catalogue = catalogue or SchemaCatalogue.load()
        ids = dict(schema_ids or {})
        missing = sorted(set(self.catalogue.current_entries()) - set(ids))
        if schema_ids is not None and missing:
            raise ConfigError(f"no schema id for event type(s) {', '.join(missing)}")
        #: the wire format this codec writes
        self.wire_format = "confluent" if schema_ids is not None else "single-object"
        #: event type -> the header it writes; schema id -> writer schema (a cache)
        self._prefixes: dict[str, bytes] = {}
        self._by_id: dict[int, SchemaEntry] = {}
        self._schema_by_id = schema_by_id
        #: event type -> (plan, header, headers); header (either format) -> (plan, class)
        self._writers: dict[str, tuple[RecordPlan, bytes, Headers]] = {}
        self._readers: dict[bytes, tuple[RecordPlan, EventBuilder]] = {}
        for name, entry in self.catalogue.current_entries().items():
            single = MAGIC + bytes.fromhex(entry.fingerprint)
            prefixes = [single]
            if schema_ids is not None:
                self._by_id[ids[name]] = entry
                prefixes.insert(0, confluent_header(ids[name]))
            self._prefixes[name] = prefixes[0]
            plan = record_plan(entry.schema)
            if plan is None or name not in EVENT_TYPES:
                continue
            self._writers[name] = (plan, prefixes[0], _headers(entry))
            build = event_builder(EVENT_TYPES[name], plan.names)
            self._readers.update((prefix, (plan, build)) for prefix in prefixes)

    def encode(self, event: Event) -> tuple[bytes, Headers]:
        fast = self._writers.get(event.type_name())
        if fast is not None:
            plan, prefix, headers = fast
            try:
                return prefix + plan.write(event), list(headers)
            except DECLINED:
                pass  # not plain values: validation and fastavro's writer decide
        return self.encode_reference(event)

    def encode_reference(self, event: Event) -> tuple[bytes, Headers]:
        """Validate, then write with fastavro: what :meth:`encode` does for any event
        its plan declines (and the reference its plans are tested against)."""
        entry = self.catalogue.current(event.type_name())
        record = {name: getattr(event, name) for name in _field_names(type(event))}
        _validate(entry, record)
        buffer = io.BytesIO()
        buffer.write(self._prefixes[entry.event_type])
        fastavro.schemaless_writer(buffer, entry.schema, record)
        return buffer.getvalue(), _headers(entry)

    def decode(self, payload: bytes) -> Event:
        size = ID_HEADER_LEN if payload[:1] == CONFLUENT_MAGIC else HEADER_LEN
        fast = self._readers.get(payload[:size]) if type(payload) is bytes else None
        if fast is not None:
            plan, build = fast
            try:
                values = plan.read(payload[size:])
            except DECLINED:
                pass  # not a well-formed body of the current schema: fastavro decides
            else:
                return build(values)
        return self.decode_reference(payload)

    def decode_reference(self, payload: bytes) -> Event:
        """Read with fastavro, resolving an older writer schema to the current one."""
        if len(payload) >= ID_HEADER_LEN and payload[:1] == CONFLUENT_MAGIC:
            writer = self.writer_of_id(int.from_bytes(payload[1:ID_HEADER_LEN], "big"))
            body = payload[ID_HEADER_LEN:]
        elif len(payload) >= HEADER_LEN and payload[:2] == MAGIC:
            writer = self.catalogue.writer(payload[2:HEADER_LEN].hex())
            body = payload[HEADER_LEN:]
        else:
            raise CorruptRecordError(
                "not a single-object or Confluent-framed Avro payload (bad magic)"
            )
        reader = self.catalogue.current(writer.event_type)
        try:
            record = fastavro.schemaless_reader(
                io.BytesIO(body),
                writer.schema,
                # the current schema: nothing to resolve (resolving costs more than the read)
                None if writer is reader else reader.schema,
            )
        except Exception as exc:  # fastavro raises bare EOFError/ValueError/etc. on garbage
            raise CorruptRecordError(f"cannot decode {writer.event_type}: {exc}") from exc
        if not isinstance(record, dict):
            raise CorruptRecordError(f"{writer.event_type} decoded to a non-record")
        return EVENT_TYPES[writer.event_type](**record)

    def writer_of_id(self, schema_id: int) -> SchemaEntry:
        """The writer schema of a Confluent-framed record: cached, else the registry's."""
        entry = self._by_id.get(schema_id)
        if entry is not None:
            return entry
        if self._schema_by_id is None:
            raise UnknownSchemaError(
                f"a Confluent-framed record with schema id {schema_id}, and no schema "
                "registry to resolve it (set schema_registry_url)"
            )
        raw = self._schema_by_id(schema_id)
        if raw is None:
            raise UnknownSchemaError(f"the schema registry has no schema with id {schema_id}")
        entry = self._by_id[schema_id] = self.catalogue.resolve(raw)
        return entry


def confluent_header(schema_id: int) -> bytes:
    """Magic byte 0 and the 4-byte big-endian schema id (the Confluent wire format)."""
    return CONFLUENT_MAGIC + schema_id.to_bytes(4, "big")


def _headers(entry: SchemaEntry) -> Headers:
    return [
        (EVENT_TYPE_HEADER, entry.event_type.encode()),
        (FINGERPRINT_HEADER, entry.fingerprint.encode()),
    ]


EventBuilder = Callable[[list[Any]], Event]


def event_builder(event_type: type[Event], names: tuple[str, ...]) -> EventBuilder:
    """Builds ``event_type`` from its field values in ``names`` order.

    A frozen dataclass's ``__init__`` parses keywords and sets each field through
    ``object.__setattr__``; for a slots dataclass without ``__post_init__`` whose fields
    are exactly ``names``, setting the slots directly builds the same object without
    that work. Any other class is called with keywords.
    """
    fields = {f.name for f in dataclasses.fields(event_type)}
    slots = [getattr(event_type, name, None) for name in names]
    if (
        fields != set(names)
        or len(fields) != len(names)
        or hasattr(event_type, "__post_init__")
        or not all(isinstance(slot, MemberDescriptorType) for slot in slots)
    ):
        return lambda values: event_type(**dict(zip(names, values, strict=True)))
    setters = tuple(slot.__set__ for slot in slots)  # type: ignore[union-attr]
    new = object.__new__

    def build(values: list[Any]) -> Event:
        event = new(event_type)
        for set_slot, value in zip(setters, values, strict=True):
            set_slot(event, value)
        return event

    return build


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(event_type: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(event_type)
    if names is None:
        names = _FIELD_NAMES[event_type] = tuple(f.name for f in dataclasses.fields(event_type))
    return names


def _validate(entry: SchemaEntry, record: Mapping[str, Any]) -> None:
    if validate(record, entry.schema, raise_errors=False):
        return  # one call for the record; per-field calls only to name the failing field
    for field in entry.schema["fields"]:
        name = field["name"]
        value = record.get(name)
        if not validate(value, field["type"], raise_errors=False):
            raise EventValidationError(
                entry.event_type, name, f"{value!r} does not match Avro type {field['type']!r}"
            )
    raise EventValidationError(entry.event_type, "*", "the record does not match its schema")
