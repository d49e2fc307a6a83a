"""Taking the embedded log's write lock when another process holds it.

SQLite lets one writer at a time into a WAL database (``BEGIN IMMEDIATE``). A writer that
finds the lock taken waits in SQLite's default busy handler, which sleeps 1, 2, 5, 10,
15, 20, 25 ... ms between tries: far longer than another writer holds the lock (a
processors child commits its positions and state many times a second, each in well
under a millisecond), so a ``reef serve`` beside it would wait milliseconds for a lock
freed in a fraction of one.

The writer connection therefore runs with a busy timeout of 0, and :func:`begin_immediate`
tries again itself after pauses that start at 50 µs and double up to 1 ms, for up to the
same 30 seconds: a waiter gets in about as soon as the holder lets go, and a holder that
never does still ends the wait with SQLite's own "database is locked" error. Statements
that must wait for readers (a checkpoint that truncates the WAL) or that run outside a
transaction (schema set-up) take SQLite's own patience again with :func:`patient`.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from typing import Final

#: how long a writer waits for another's write transaction before giving up (SQLite's
#: ``busy_timeout`` on every other connection of the log)
PATIENCE_SECONDS: Final = 30.0
_FIRST_PAUSE: Final = 0.00005
_LONGEST_PAUSE: Final = 0.001


def begin_immediate(db: sqlite3.Connection, patience: float = PATIENCE_SECONDS) -> None:
    """``BEGIN IMMEDIATE`` on ``db`` (busy timeout 0), retried in short pauses while
    another connection holds the write lock; raises SQLite's error past ``patience``."""
    deadline = 0.0
    pause = _FIRST_PAUSE
    while True:
        try:
            db.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:  # also its extended codes
                raise
            now = time.monotonic()
            if not deadline:
                deadline = now + patience
            elif now >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE)


def impatient(db: sqlite3.Connection) -> None:
    """Make ``db`` fail at once on a taken lock, for :func:`begin_immediate` to wait."""
    db.execute("PRAGMA busy_timeout=0")


@contextlib.contextmanager
def patient(db: sqlite3.Connection, patience: float = PATIENCE_SECONDS) -> Iterator[None]:
    """Let SQLite's busy handler wait (up to ``patience``) for what runs inside."""
    db.execute(f"PRAGMA busy_timeout={int(patience * 1000)}")
    try:
        yield
    finally:
        impatient(db)
