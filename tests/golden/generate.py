"""Write ``tests/golden/<Type>.bin``: one encoded event per event type.

    python -m tests.golden.generate          # write the files that are missing
    python -m tests.golden.generate --force  # rewrite all (only when you mean it)

The files are committed and never rewritten by a schema change: they are payloads an
*old* writer produced, and tests/unit/reef/test_schema_compat.py decodes them with the
*current* reader schemas. Rules for editing :func:`golden_events`:

* never change a value that is already there (the .bin files hold it);
* a new event type gets a new entry (then run this script to write its file);
* a field added to a schema later is left at its default here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from reef.codec import EventCodec
from tests.support.golden import golden_events, golden_path


def write(*, force: bool = False) -> list[Path]:
    codec = EventCodec()
    written = []
    for type_name, event in golden_events().items():
        path = golden_path(type_name)
        if path.exists() and not force:
            continue
        path.write_bytes(codec.encode(event)[0])
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    for path in write(force="--force" in argv):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
