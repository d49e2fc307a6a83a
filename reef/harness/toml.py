"""A small TOML writer for merged config objects (Codex's ``config.toml``).

Tables, strings, booleans, integers, finite floats and arrays of those; anything TOML
cannot say plainly (null, arrays of tables, non-finite numbers) is a
:class:`~reef.harness.errors.HarnessTreeError` rather than a guess.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from reef.harness.errors import HarnessTreeError

_BARE_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")


def to_toml(settings: Mapping[str, Any]) -> str:
    """``settings`` as a TOML document: plain keys first, then one ``[table]`` per object."""
    lines: list[str] = []
    _table(lines, (), settings)
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(lines: list[str], trail: tuple[str, ...], table: Mapping[str, Any]) -> None:
    nested = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    if trail and (len(nested) < len(table) or not table):
        lines.append("")
        lines.append("[" + ".".join(_key(k) for k in trail) + "]")
    for key, value in table.items():
        if key not in nested:
            lines.append(f"{_key(key)} = {_value(value, (*trail, key))}")
    for key, value in nested.items():
        _table(lines, (*trail, key), value)


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any, trail: tuple[str, ...]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list) and not any(isinstance(v, Mapping) for v in value):
        return "[" + ", ".join(_value(v, trail) for v in value) + "]"
    raise HarnessTreeError(f"config {'.'.join(trail)!r}: {value!r} has no plain TOML form")
