"""``reef.history`` is a library for analytics programs: importing it loads Reef's reading
side only (codec, log port, key rings, artifact store, event store), not the server, the
processors' hosts, the trainers or pyarrow (loaded when a table is made)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import reef.history

REPO = Path(__file__).resolve().parents[2]

#: modules (or packages) an analytics program must not pay for by importing reef.history
NOT_LOADED = (
    "fastapi",
    "starlette",
    "uvicorn",
    "aiohttp",
    "torch",
    "transformers",
    "pyarrow",
    "aiokafka",
    "minio",
    "trainers",
    "recipes",
    "streams",
    "reef.api",
    "reef.wiring",
    "reef.cli",
    "reef.hosts",
    "reef.engine",
    "reef.sidecar",
)

_LOADED = """
import sys
import reef.history
print("\\n".join(sorted(sys.modules)))
"""


def test_importing_reef_stream_loads_no_server_and_no_pyarrow() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    found = sorted(m for m in loaded if any(m == n or m.startswith(f"{n}.") for n in NOT_LOADED))
    assert not found, f"importing reef.history loads {found}"


def test_the_public_names() -> None:
    assert sorted(reef.history.__all__) == [
        "EventStream",
        "SkippedRecord",
        "StreamRecord",
        "UndecodableRecordError",
        "arrow_batches",
        "columns",
        "open_stream",
        "read_tables",
        "readable_store",
        "schema",
        "to_arrow",
    ]
    for name in reef.history.__all__:
        assert getattr(reef.history, name).__doc__, name
