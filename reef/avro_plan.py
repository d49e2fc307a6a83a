"""Compiled Avro binary readers and writers for the record schemas Reef's events use.

A plan is built once per current schema: one small function per field, chosen from the
schema's type, so reading or writing a record is a walk over a tuple of functions, not a
dispatch on the schema at every value (what fastavro's generic reader and writer and its
``validate`` do per call). Plans are a fast path only, and they decline rather than guess:

* a writer accepts only values whose Python type is exactly the plain one for the Avro
  type (``str``, ``bool``, ``int`` within range, ``float``, ``bytes``, ``list``, ``dict``,
  an aware ``datetime``): every value it accepts is one ``fastavro.validation.validate``
  accepts, and it writes the bytes ``fastavro.schemaless_writer`` writes;
* a reader accepts only a well-formed body that it consumes exactly (valid union
  branches, booleans 0 or 1, lengths within the payload, UTF-8, varints of 64 bits).

Anything else raises ``Declined`` (``ValueError``) or the error of the operation that
failed (an index past the end, a bad UTF-8 byte), and :class:`reef.codec.EventCodec` then
takes its reference path (fastavro with validation), which decides as it always did: the
plans change the cost of encoding and decoding, never a result or an error.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Any, Final

INT_MIN: Final = -(2**31)
INT_MAX: Final = 2**31 - 1
LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_DOUBLE: Final = struct.Struct("<d")

Reader = Callable[[bytes, int], tuple[Any, int]]
Writer = Callable[[bytearray, Any], None]


#: raised by a plan for a value or payload it does not take: the reference path decides
#: (a builtin, so the signal adds nothing to the project's error tree)
Declined: Final = ValueError

#: what a plan's functions may raise on input they do not take (all mean "declined")
DECLINED: Final = (
    IndexError,
    OverflowError,
    struct.error,
    UnicodeError,
    TypeError,
    ValueError,
    AttributeError,
)


# -- writers --------------------------------------------------------------------------


def _put_long(out: bytearray, n: int) -> None:
    zigzag = (n << 1) ^ (n >> 63)
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def _write_long(out: bytearray, value: Any) -> None:
    if type(value) is not int or not LONG_MIN <= value <= LONG_MAX:
        raise Declined
    _put_long(out, value)


def _write_int(out: bytearray, value: Any) -> None:
    if type(value) is not int or not INT_MIN <= value <= INT_MAX:
        raise Declined
    _put_long(out, value)


def _write_boolean(out: bytearray, value: Any) -> None:
    if type(value) is not bool:
        raise Declined
    out.append(1 if value else 0)


def _write_double(out: bytearray, value: Any) -> None:
    if type(value) is not float:
        raise Declined
    out += _DOUBLE.pack(value)


def _write_string(out: bytearray, value: Any) -> None:
    if type(value) is not str:
        raise Declined
    data = value.encode()
    size = len(data)
    if size < 64:
        out.append(size << 1)
    else:
        _put_long(out, size)
    out += data


def _write_bytes(out: bytearray, value: Any) -> None:
    if type(value) is not bytes:
        raise Declined
    _put_long(out, len(value))
    out += value


def _write_timestamp_millis(out: bytearray, value: Any) -> None:
    if type(value) is not datetime or value.tzinfo is None:
        raise Declined
    delta = value - _EPOCH
    millis = (delta.days * 86400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if not LONG_MIN <= millis <= LONG_MAX:
        raise Declined
    _put_long(out, millis)


def _optional_writer(write: Writer) -> Writer:
    def write_optional(out: bytearray, value: Any) -> None:
        if value is None:
            out.append(0)
        else:
            out.append(2)  # union branch 1, zigzag
            write(out, value)

    return write_optional


def _array_writer(write: Writer) -> Writer:
    def write_array(out: bytearray, value: Any) -> None:
        if type(value) is not list:
            raise Declined
        if value:
            _put_long(out, len(value))
            for item in value:
                write(out, item)
        out.append(0)

    return write_array


def _map_writer(write: Writer) -> Writer:
    def write_map(out: bytearray, value: Any) -> None:
        if type(value) is not dict:
            raise Declined
        if value:
            _put_long(out, len(value))
            for key, item in value.items():
                _write_string(out, key)
                write(out, item)
        out.append(0)

    return write_map


_WRITERS: Final[dict[str, Writer]] = {
    "long": _write_long,
    "int": _write_int,
    "boolean": _write_boolean,
    "double": _write_double,
    "string": _write_string,
    "bytes": _write_bytes,
}


# -- readers --------------------------------------------------------------------------


def _get_long(buf: bytes, pos: int) -> tuple[int, int]:
    byte = buf[pos]
    pos += 1
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos
    n = byte & 0x7F
    shift = 7
    while True:
        byte = buf[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift > 63:
            raise Declined  # longer than any 64-bit varint
    if n >> 64:
        raise Declined
    return (n >> 1) ^ -(n & 1), pos


def _read_long(buf: bytes, pos: int) -> tuple[Any, int]:
    return _get_long(buf, pos)


def _read_boolean(buf: bytes, pos: int) -> tuple[Any, int]:
    byte = buf[pos]
    if byte > 1:
        raise Declined
    return byte == 1, pos + 1


def _read_double(buf: bytes, pos: int) -> tuple[Any, int]:
    return _DOUBLE.unpack_from(buf, pos)[0], pos + 8


def _read_raw(buf: bytes, pos: int) -> tuple[bytes, int]:
    byte = buf[pos]
    if byte < 0x80:
        size = (byte >> 1) ^ -(byte & 1)
        pos += 1
    else:
        size, pos = _get_long(buf, pos)
    end = pos + size
    if size < 0 or end > len(buf):
        raise Declined
    return buf[pos:end], end


def _read_string(buf: bytes, pos: int) -> tuple[Any, int]:
    raw, pos = _read_raw(buf, pos)
    return raw.decode(), pos


def _read_bytes(buf: bytes, pos: int) -> tuple[Any, int]:
    return _read_raw(buf, pos)


def _read_timestamp_millis(buf: bytes, pos: int) -> tuple[Any, int]:
    millis, pos = _get_long(buf, pos)
    return _EPOCH + timedelta(microseconds=millis * 1000), pos


def _optional_reader(read: Reader) -> Reader:
    def read_optional(buf: bytes, pos: int) -> tuple[Any, int]:
        branch = buf[pos]
        if branch == 0:
            return None, pos + 1
        if branch != 2:
            raise Declined
        return read(buf, pos + 1)

    read_optional.reads = read  # type: ignore[attr-defined]  # lets RecordPlan inline it
    return read_optional


def _block_count(buf: bytes, pos: int) -> tuple[int, int]:
    count, pos = _get_long(buf, pos)
    if count < 0:  # a negative count is followed by the block's size in bytes
        _, pos = _get_long(buf, pos)
        count = -count
    return count, pos


def _array_reader(read: Reader) -> Reader:
    def read_array(buf: bytes, pos: int) -> tuple[Any, int]:
        items: list[Any] = []
        count, pos = _block_count(buf, pos)
        while count:
            for _ in range(count):
                item, pos = read(buf, pos)
                items.append(item)
            count, pos = _block_count(buf, pos)
        return items, pos

    return read_array


def _map_reader(read: Reader) -> Reader:
    def read_map(buf: bytes, pos: int) -> tuple[Any, int]:
        items: dict[str, Any] = {}
        count, pos = _block_count(buf, pos)
        while count:
            for _ in range(count):
                key, pos = _read_string(buf, pos)
                items[key], pos = read(buf, pos)
            count, pos = _block_count(buf, pos)
        return items, pos

    return read_map


_READERS: Final[dict[str, Reader]] = {
    "long": _read_long,
    "int": _read_long,
    "boolean": _read_boolean,
    "double": _read_double,
    "string": _read_string,
    "bytes": _read_bytes,
}


# -- plans ----------------------------------------------------------------------------


Compiled = tuple[Reader, Writer]


def _compile(schema: Any) -> Compiled | None:
    """The reader and writer of a field's type; None where no plan covers the type."""
    if isinstance(schema, list):
        if len(schema) != 2 or schema[0] != "null" or schema[1] == "null":
            return None
        return _wrapped(_compile(schema[1]), _optional_reader, _optional_writer)
    if isinstance(schema, dict):
        kind = schema["type"]
        logical = schema.get("logicalType")
        if kind == "long" and logical == "timestamp-millis":
            return _read_timestamp_millis, _write_timestamp_millis
        if logical is not None:
            return None
        if kind == "array":
            return _wrapped(_compile(schema["items"]), _array_reader, _array_writer)
        if kind == "map":
            return _wrapped(_compile(schema["values"]), _map_reader, _map_writer)
        schema = kind
    if isinstance(schema, str) and schema in _READERS:
        return _READERS[schema], _WRITERS[schema]
    return None


def _wrapped(
    inner: Compiled | None,
    reader: Callable[[Reader], Reader],
    writer: Callable[[Writer], Writer],
) -> Compiled | None:
    return None if inner is None else (reader(inner[0]), writer(inner[1]))


#: how :meth:`RecordPlan.read` reads a field: inline (the common kinds) or by its reader
_STRING: Final = 0
_OPTIONAL_STRING: Final = 1
_CALL: Final = 2


def _read_kind(read: Reader) -> int:
    if read is _read_string:
        return _STRING
    if getattr(read, "reads", None) is _read_string:
        return _OPTIONAL_STRING
    return _CALL


class RecordPlan:
    """Reads and writes the Avro binary body of one record schema, field by field."""

    def __init__(self, names: Sequence[str], compiled: Sequence[Compiled]) -> None:
        self.names: tuple[str, ...] = tuple(names)
        self._readers = tuple((_read_kind(read), read) for read, _ in compiled)
        self._writers = tuple(write for _, write in compiled)
        self._values = attrgetter(*self.names)

    def write(self, obj: Any) -> bytes:
        """The body of ``obj``'s attributes named as the record's fields (or Declined)."""
        out = bytearray()
        for write, value in zip(self._writers, self._values(obj), strict=True):
            write(out, value)
        return bytes(out)

    def read(self, buf: bytes) -> list[Any]:
        """The record's field values in schema order, from a body that holds exactly one
        record (or Declined). Strings, most of every event, are read inline: a call per
        field costs about as much as reading it."""
        pos = 0
        end = len(buf)
        values: list[Any] = []
        append = values.append
        for kind, read in self._readers:
            if kind == _CALL:
                value, pos = read(buf, pos)
                append(value)
                continue
            byte = buf[pos]
            if kind == _OPTIONAL_STRING:
                if byte == 0:
                    append(None)
                    pos += 1
                    continue
                if byte != 2:
                    raise Declined
                pos += 1
                byte = buf[pos]
            if byte < 0x80:  # a length below 64
                pos += 1
            elif buf[pos + 1] < 0x80:  # below 8192
                byte = (byte & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                size, pos = _get_long(buf, pos)
                if size < 0:
                    raise Declined
                byte = size << 1  # the zigzag form the test below reads
            if byte & 1:
                raise Declined  # a negative length
            stop = pos + (byte >> 1)
            if stop > end:
                raise Declined
            append(buf[pos:stop].decode())
            pos = stop
        if pos != end:
            raise Declined
        return values


def record_plan(schema: dict[str, Any]) -> RecordPlan | None:
    """The plan of a record schema, or None where it uses a type no plan covers."""
    compiled = [_compile(field["type"]) for field in schema["fields"]]
    if None in compiled:
        return None
    names = [field["name"] for field in schema["fields"]]
    return RecordPlan(names, [c for c in compiled if c is not None])
