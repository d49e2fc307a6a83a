"""A stream worker's data directory (its RocksDB stores): one per worker, emptied at start.

Layout: ``<state_dir>/streams/<app id>/worker-<n>``. A worker claims the first slot no
other live worker holds (an ``flock`` on ``worker-<n>.lock``, released by the kernel
when the process dies, SIGKILL included), so workers of one deployment on one machine
never share RocksDB files, and a killed worker's slot is reused instead of piling up; a
worker that stops normally removes its slot's files.

The slot is emptied before the worker starts. The changelog, read ``read_committed``, is
the only copy of the state exactly-once can trust, so every assignment restores the
stores from it (:mod:`streams.host`); RocksDB only keeps the state out of memory while
the worker runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def worker_data_dir(base: Path) -> Iterator[Path]:
    """An empty data directory under ``base`` that is this process's until the block ends."""
    base.mkdir(parents=True, exist_ok=True)
    for n in itertools.count():
        lock = (base / f"worker-{n}.lock").open("a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        path = base / f"worker-{n}"
        try:
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)  # never read again: see above
            lock.close()
        return
