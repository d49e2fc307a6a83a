"""How processor hosts store state values: JSON text, written and read with orjson.

Both hosts keep a processor's state as JSON (the embedded host in SQLite rows, the Kafka
host in changelog records), and replay compares decoded values, so the exact text does not
matter; its cost does (a state value is written on nearly every event, so the encoder is
orjson's C one rather than the standard library's). Keys of dicts that are not strings
are written as strings, as the standard library does.
"""

from __future__ import annotations

from typing import Any

import orjson

_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def dump_value(value: Any) -> bytes:
    return orjson.dumps(value, option=_OPTIONS)


def load_value(raw: bytes | str) -> Any:
    return orjson.loads(raw)
