"""Schema evolution: the current schemas must read everything ever written.

For every ``schemas/<Type>.avsc``, every version committed to git (and every superseded
version kept in ``schemas/history/``) is a *writer* schema; the working-tree file is the
*reader*. Each pair is checked twice:

* structurally, by :func:`incompatibilities` (Avro schema-resolution rules: every reader
  field missing from the writer has a default, types only change by Avro promotion,
  record names and namespaces stay), and
* empirically, by encoding sample data with the old schema and decoding it with
  ``fastavro.schemaless_reader(old, current)``.

Every writer fingerprint must also be in the catalogue, so the codec can decode old
payloads (copy a superseded schema into ``schemas/history/`` when you change it). The
golden payloads in ``tests/golden/`` are such old payloads, decoded with today's reader.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest

from reef.codec import (
    HEADER_LEN,
    MAGIC,
    EventCodec,
    SchemaCatalogue,
    schema_dir,
    schema_fingerprint,
)
from reef.core.events import EVENT_TYPES
from tests.support.golden import golden_events, golden_path

REPO = Path(__file__).resolve().parents[3]
SCHEMAS = schema_dir()
PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
COMPLEX = frozenset({"record", "enum", "fixed", "array", "map"})
PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


# -- the structural checker -------------------------------------------------------------


def _fullname(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


class _Side:
    """Named types seen while walking one schema (for references by name)."""

    def __init__(self) -> None:
        self.names: dict[str, dict[str, Any]] = {}

    def normalize(self, schema: Any, namespace: str | None) -> tuple[Any, str | None]:
        """(schema as a dict or a list, namespace in effect inside it)."""
        if isinstance(schema, list):
            return schema, namespace
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return {"type": schema}, namespace
            full = _fullname(schema, namespace)
            if full not in self.names:
                raise ValueError(f"unknown named type {schema!r}")
            named = self.names[full]
            return named, full.rpartition(".")[0] or None
        kind = schema["type"]
        if isinstance(kind, (dict, list)) or kind not in PRIMITIVES | COMPLEX:
            # {"type": {...}}, {"type": [...]} or {"type": "SomeNamedType"}
            return self.normalize(kind, namespace)
        if kind in ("record", "enum", "fixed"):
            full = _fullname(schema["name"], schema.get("namespace", namespace))
            self.names[full] = schema
            return schema, full.rpartition(".")[0] or None
        return schema, namespace


def incompatibilities(reader: Any, writer: Any) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    problems: list[str] = []
    _check(reader, writer, _Side(), _Side(), None, None, "", problems, set())
    return problems


def _compatible(
    reader: Any,
    writer: Any,
    r: _Side,
    w: _Side,
    rns: str | None,
    wns: str | None,
    seen: set[tuple[str, str]],
) -> bool:
    found: list[str] = []
    _check(reader, writer, r, w, rns, wns, "", found, set(seen))
    return not found


def _check(
    reader: Any,
    writer: Any,
    r: _Side,
    w: _Side,
    rns: str | None,
    wns: str | None,
    path: str,
    problems: list[str],
    seen: set[tuple[str, str]],
) -> None:
    where = path or "<root>"
    reader, rns = r.normalize(reader, rns)
    writer, wns = w.normalize(writer, wns)

    if isinstance(writer, list):  # every branch the writer may have used must resolve
        for branch in writer:
            if isinstance(reader, list):
                if not any(_compatible(rb, branch, r, w, rns, wns, seen) for rb in reader):
                    problems.append(
                        f"{where}: writer union branch {_show(branch)} has no "
                        f"matching reader branch in {_show(reader)}"
                    )
            else:
                _check(reader, branch, r, w, rns, wns, path, problems, seen)
        return
    if isinstance(reader, list):
        if not any(_compatible(rb, writer, r, w, rns, wns, seen) for rb in reader):
            problems.append(
                f"{where}: {_show(writer)} matches no branch of reader union {_show(reader)}"
            )
        return

    rkind, wkind = reader["type"], writer["type"]
    if rkind != wkind and rkind not in PROMOTIONS.get(wkind, ()):
        problems.append(f"{where}: type changed from {wkind} to {rkind}")
        return
    if reader.get("logicalType") != writer.get("logicalType"):
        problems.append(
            f"{where}: logical type changed from {writer.get('logicalType')} "
            f"to {reader.get('logicalType')}"
        )
        return

    if rkind in ("record", "enum", "fixed"):
        rname = _fullname(reader["name"], reader.get("namespace", rns))
        wname = _fullname(writer["name"], writer.get("namespace", wns))
        aliases = {_fullname(a, reader.get("namespace", rns)) for a in reader.get("aliases", [])}
        if rname != wname and wname not in aliases:
            problems.append(f"{where}: {rkind} renamed from {wname} to {rname}")
            return
        if (rname, wname) in seen:
            return
        seen = seen | {(rname, wname)}
        rns, wns = rname.rpartition(".")[0] or None, wname.rpartition(".")[0] or None

    if rkind == "record":
        writer_fields = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            names = [field["name"], *field.get("aliases", [])]
            match = next((writer_fields[n] for n in names if n in writer_fields), None)
            field_path = f"{path}.{field['name']}" if path else field["name"]
            if match is None:
                if "default" not in field:
                    problems.append(f"{field_path}: new field has no default")
                continue
            _check(field["type"], match["type"], r, w, rns, wns, field_path, problems, seen)
    elif rkind == "enum":
        missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
        if missing and "default" not in reader:
            problems.append(f"{where}: enum symbols {missing} removed and no default")
    elif rkind == "fixed":
        if reader["size"] != writer["size"]:
            problems.append(
                f"{where}: fixed size changed from {writer['size']} to {reader['size']}"
            )
    elif rkind == "array":
        _check(reader["items"], writer["items"], r, w, rns, wns, f"{path}[]", problems, seen)
    elif rkind == "map":
        _check(reader["values"], writer["values"], r, w, rns, wns, f"{path}{{}}", problems, seen)


def _show(schema: Any) -> str:
    return json.dumps(schema, sort_keys=True)[:120]


# -- sample data for a schema ------------------------------------------------------------


def sample_datum(schema: Any, variant: int, names: dict[str, Any] | None = None) -> Any:
    """A deterministic datum valid for ``schema``; ``variant`` picks union branches."""
    names = {} if names is None else names
    if isinstance(schema, list):
        return sample_datum(schema[variant % len(schema)], variant, names)
    if isinstance(schema, str):
        if schema in names:
            return sample_datum(names[schema], variant, names)
        schema = {"type": schema}
    kind = schema["type"]
    if isinstance(kind, (dict, list)):
        return sample_datum(kind, variant, names)
    if kind in ("record", "enum", "fixed"):
        names[schema["name"]] = schema
    if schema.get("logicalType") == "timestamp-millis":
        return 1_700_000_000_123 + variant
    values: dict[str, Any] = {
        "null": None,
        "boolean": bool(variant % 2),
        "int": -(2**31) if variant % 2 else 2**31 - 1,
        "long": -(2**63) if variant % 2 else 2**63 - 1,
        "float": 1.5,
        "double": -2.25e300 if variant % 2 else 0.5,
        "bytes": b"\x00\xff",
        "string": "ünïcødé ✓" if variant % 2 else "",
    }
    if kind in values:
        return values[kind]
    if kind == "array":
        return [sample_datum(schema["items"], variant + i, names) for i in range(variant % 3 + 1)]
    if kind == "map":
        return {
            f"k{i}": sample_datum(schema["values"], variant + i, names)
            for i in range(variant % 3 + 1)
        }
    if kind == "enum":
        return schema["symbols"][variant % len(schema["symbols"])]
    if kind == "fixed":
        return bytes(schema["size"])
    if kind == "record":
        return {f["name"]: sample_datum(f["type"], variant, names) for f in schema["fields"]}
    raise AssertionError(f"no sample for {kind!r}")


def resolve_empirically(reader: dict[str, Any], writer: dict[str, Any], variant: int) -> Any:
    """Write a sample with ``writer`` and read it back with ``reader``."""
    datum = sample_datum(writer, variant)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(writer), datum)
    buffer.seek(0)
    result = fastavro.schemaless_reader(
        buffer, fastavro.parse_schema(writer), fastavro.parse_schema(reader)
    )
    assert buffer.read() == b"", "reader left bytes unread"
    return result


# -- the versions under test ------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True
    ).stdout


def committed_versions(type_name: str) -> list[tuple[str, dict[str, Any]]]:
    """Every committed version of ``schemas/<Type>.avsc``, newest first, as (label, schema)."""
    relative = f"schemas/{type_name}.avsc"
    out = []
    for sha in _git("log", "--format=%H", "--", relative).split():
        try:
            text = _git("show", f"{sha}:{relative}")
        except subprocess.CalledProcessError:  # the commit deleted the file
            continue
        out.append((f"{relative}@{sha[:10]}", json.loads(text)))
    return out


def history_versions(type_name: str) -> list[tuple[str, dict[str, Any]]]:
    """Superseded versions kept in ``schemas/history/`` for this type."""
    out = []
    for path in sorted((SCHEMAS / "history").glob("*.avsc")):
        raw = json.loads(path.read_text())
        if raw.get("name") == type_name:
            out.append((f"schemas/history/{path.name}", raw))
    return out


def current(type_name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / f"{type_name}.avsc").read_text())
    return schema


def writer_versions() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for type_name in sorted(EVENT_TYPES):
        for label, raw in [*committed_versions(type_name), *history_versions(type_name)]:
            yield type_name, label, raw


WRITERS = list(writer_versions())
WRITER_IDS = [label for _, label, _ in WRITERS]


def test_git_history_is_visible() -> None:
    """Every committed schema has at least its HEAD version (the checks below are not vacuous)."""
    tracked = set(_git("ls-files", "schemas").split())
    for type_name in EVENT_TYPES:
        if f"schemas/{type_name}.avsc" in tracked:
            assert committed_versions(type_name), type_name
    assert WRITERS


def test_history_files_parse_and_name_a_known_type() -> None:
    for path in sorted((SCHEMAS / "history").glob("*.avsc")):
        raw = json.loads(path.read_text())
        assert raw.get("name") in EVENT_TYPES, f"{path.name}: unknown event type"
        fastavro.parse_schema(raw)


@pytest.mark.parametrize(("type_name", "label", "writer"), WRITERS, ids=WRITER_IDS)
def test_current_schema_reads_old_version_structurally(
    type_name: str, label: str, writer: dict[str, Any]
) -> None:
    reader = current(type_name)
    assert incompatibilities(reader, writer) == [], f"{label} -> working tree"
    assert reader["name"] == writer["name"]
    assert reader.get("namespace") == writer.get("namespace")


@pytest.mark.parametrize(("type_name", "label", "writer"), WRITERS, ids=WRITER_IDS)
@pytest.mark.parametrize("variant", [0, 1, 2])
def test_current_schema_reads_old_version_empirically(
    type_name: str, label: str, writer: dict[str, Any], variant: int
) -> None:
    reader = current(type_name)
    record = resolve_empirically(reader, writer, variant)
    assert [f["name"] for f in reader["fields"]] == list(record)
    EVENT_TYPES[type_name](**record)  # the dataclass takes what the reader produced


@pytest.mark.parametrize(("type_name", "label", "writer"), WRITERS, ids=WRITER_IDS)
def test_old_fingerprint_is_in_the_catalogue(
    type_name: str, label: str, writer: dict[str, Any]
) -> None:
    fingerprint = schema_fingerprint(writer)
    catalogue = SchemaCatalogue.load()
    assert fingerprint in catalogue.fingerprints(), (
        f"{label} (fingerprint {fingerprint}) is not in the catalogue: copy it to "
        f"schemas/history/{type_name}.<n>.avsc so events written with it stay decodable"
    )
    assert catalogue.writer(fingerprint).event_type == type_name


def test_working_tree_differs_from_head_only_compatibly() -> None:
    """Uncommitted edits are checked too: the working tree reads HEAD's version."""
    for type_name in sorted(EVENT_TYPES):
        versions = committed_versions(type_name)
        if not versions:
            continue
        _, head = versions[0]
        assert incompatibilities(current(type_name), head) == [], type_name
        for variant in range(3):
            resolve_empirically(current(type_name), head, variant)


# -- golden payloads ----------------------------------------------------------------------


@pytest.mark.parametrize("type_name", sorted(EVENT_TYPES))
def test_golden_payload_decodes_with_the_current_reader(type_name: str) -> None:
    path = golden_path(type_name)
    assert path.is_file(), (
        f"{path} is missing: run `python -m tests.golden.generate` and commit the file"
    )
    payload = path.read_bytes()
    assert payload[:2] == MAGIC
    codec = EventCodec()
    event = codec.decode(payload)
    expected = golden_events()[type_name]
    assert type(event) is type(expected)

    writer = codec.catalogue.writer(payload[2:HEADER_LEN].hex())
    written = {f["name"] for f in writer.schema["fields"]}
    for field in dataclasses.fields(event):
        got = getattr(event, field.name)
        if field.name in written:
            assert got == getattr(expected, field.name), field.name
        else:  # added after the golden file was written: the reader's default
            reader_field = next(
                f
                for f in codec.catalogue.current(type_name).schema["fields"]
                if f["name"] == field.name
            )
            assert got == reader_field["default"], field.name


def test_golden_payloads_cover_exactly_the_event_types() -> None:
    on_disk = {p.stem for p in golden_path("x").parent.glob("*.bin")}
    assert on_disk == set(EVENT_TYPES)


# -- the checker itself ------------------------------------------------------------------

BASE: dict[str, Any] = {
    "type": "record",
    "name": "Thing",
    "namespace": "reef.events",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "count", "type": "int"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "map", "values": "string"}, "default": {}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def _evolve(**changes: Any) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(json.dumps(BASE))
    fields = {f["name"]: f for f in schema["fields"]}
    for name, new in changes.items():
        if new is None:
            schema["fields"] = [f for f in schema["fields"] if f["name"] != name]
        elif name in fields:
            fields[name].clear()
            fields[name].update({"name": name, **new})
        else:
            schema["fields"].append({"name": name, **new})
    return schema


def _empirically_fails(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    try:
        for variant in range(3):
            resolve_empirically(reader, writer, variant)
    except Exception:
        return True
    return False


@pytest.mark.parametrize(
    ("reader", "expected"),
    [
        (_evolve(extra={"type": "string"}), "extra: new field has no default"),
        (_evolve(count={"type": "string"}), "count: type changed from int to string"),
        (_evolve(id={"type": "int"}), "id: type changed from string to int"),
        (_evolve(note={"type": "string", "default": ""}), "note: type changed from null to string"),
        (
            _evolve(tags={"type": {"type": "map", "values": "long"}, "default": {}}),
            "tags{}: type changed from string to long",
        ),
        (
            _evolve(at={"type": {"type": "long", "logicalType": "timestamp-micros"}}),
            "at: logical type changed",
        ),
        ({**BASE, "name": "Renamed"}, "record renamed from reef.events.Thing"),
        ({**BASE, "namespace": "reef.other"}, "record renamed from reef.events.Thing"),
    ],
    ids=[
        "new-field-no-default",
        "int-to-string",
        "string-to-int",
        "union-narrowed",
        "map-values-changed",
        "logical-type-changed",
        "renamed",
        "namespace-changed",
    ],
)
def test_checker_rejects_incompatible_changes(reader: dict[str, Any], expected: str) -> None:
    problems = incompatibilities(reader, BASE)
    assert problems, "an incompatible change was accepted"
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    "reader",
    [
        _evolve(extra={"type": "string"}),
        _evolve(count={"type": "string"}),
        _evolve(note={"type": "string", "default": ""}),
        {**BASE, "name": "Renamed"},
    ],
    ids=["new-field-no-default", "int-to-string", "union-narrowed", "renamed"],
)
def test_incompatible_changes_also_fail_empirically(reader: dict[str, Any]) -> None:
    assert _empirically_fails(reader, BASE)


@pytest.mark.parametrize(
    "reader",
    [
        BASE,
        _evolve(extra={"type": ["null", "string"], "default": None}),
        _evolve(extra2={"type": {"type": "array", "items": "string"}, "default": []}),
        _evolve(count={"type": "long"}),
        _evolve(count={"type": "double"}),
        _evolve(count={"type": ["null", "int"], "default": None}),
        _evolve(id={"type": "bytes"}),
        _evolve(note=None),
        _evolve(renamed_count={"type": "int", "aliases": ["count"]}, count=None),
        {**BASE, "name": "Renamed", "aliases": ["Thing"]},
        {**BASE, "doc": "docs do not matter"},
    ],
    ids=[
        "same",
        "optional-field",
        "array-with-default",
        "int-to-long",
        "int-to-double",
        "into-union",
        "string-to-bytes",
        "field-removed",
        "field-alias",
        "record-alias",
        "doc",
    ],
)
def test_checker_accepts_compatible_changes(reader: dict[str, Any]) -> None:
    assert incompatibilities(reader, BASE) == []
    assert not _empirically_fails(reader, BASE)


def test_checker_handles_enums_and_named_references() -> None:
    writer = {
        "type": "record",
        "name": "R",
        "namespace": "n",
        "fields": [
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
            {"name": "again", "type": "Kind"},
        ],
    }
    narrowed = json.loads(json.dumps(writer))
    narrowed["fields"][0]["type"]["symbols"] = ["A"]
    assert any("enum symbols ['B'] removed" in p for p in incompatibilities(narrowed, writer))
    widened = json.loads(json.dumps(writer))
    widened["fields"][0]["type"]["symbols"] = ["A", "B", "C"]
    assert incompatibilities(widened, writer) == []
    assert incompatibilities(writer, writer) == []
