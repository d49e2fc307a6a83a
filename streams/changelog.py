"""The stream host's durable state: one compacted changelog topic per processor.

``<group>-<processor>-state-changelog`` carries each table write of the host as a
record whose key is the table key JSON-encoded (``'"rec/..."'``) and whose value is the
JSON document (a tombstone deletes). :func:`durable_tables` reads the tables back the
way the host restores them, so ``reef replay --compare-live`` never needs to know the
encoding.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from reef.core.topics import STREAMS_APP_ID
from reef.log.base import EventLog


def changelog_topic(group: str, processor: str) -> str:
    return f"{group}-{processor}-state-changelog"


async def durable_tables(log: EventLog, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each processor's table as its changelog holds it now (the log adds the prefix)."""
    return {name: await changelog_table(log, name) for name in names}


async def changelog_table(log: EventLog, name: str) -> dict[str, Any]:
    """The latest value per key of one processor's changelog, keys decoded."""
    table: dict[str, Any] = {}
    async for record in log.read(changelog_topic(STREAMS_APP_ID, name)):
        key = _table_key((record.key or b"").decode())
        if record.value is None or record.value in (b"", b"null"):
            table.pop(key, None)
        else:
            table[key] = json.loads(record.value)
    return table


async def durable_rows(log: EventLog, processor: str, prefix: str) -> dict[str, Any]:
    """One processor's durable rows whose keys start with ``prefix`` (its whole changelog
    is read: a table read this way should be small, like the rollout controller's)."""
    table = await changelog_table(log, processor)
    return {key: value for key, value in sorted(table.items()) if key.startswith(prefix)}


def _table_key(raw: str) -> str:
    """The host writes a table's ``str`` keys JSON-encoded: decode them."""
    try:
        decoded = json.loads(raw)
    except ValueError:
        return raw
    return decoded if isinstance(decoded, str) else raw
