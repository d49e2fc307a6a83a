"""The embedded log's writer waits for another connection's write lock in short steps
(reef.log.embedded_lock), and still gives up with SQLite's error past its patience."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from reef.log.embedded import connect
from reef.log.embedded_lock import begin_immediate, impatient, patient


def _writer(path: Path) -> sqlite3.Connection:
    db = connect(path)
    db.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
    impatient(db)
    return db


def test_a_writer_gets_the_lock_once_the_other_process_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    holder, waiter = _writer(path), _writer(path)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")

    def release() -> None:
        time.sleep(0.2)
        holder.execute("COMMIT")

    thread = threading.Thread(target=release)
    thread.start()
    began = time.monotonic()
    begin_immediate(waiter)
    waited = time.monotonic() - began
    # its transaction began after the holder's COMMIT: it sees the holder's row
    assert [x for (x,) in waiter.execute("SELECT x FROM t")] == [1]
    waiter.execute("INSERT INTO t VALUES (2)")
    waiter.execute("COMMIT")
    thread.join()
    assert waited >= 0.19
    assert [x for (x,) in waiter.execute("SELECT x FROM t ORDER BY x")] == [1, 2]


def test_a_lock_never_let_go_ends_the_wait_with_sqlites_busy_error(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    holder, waiter = _writer(path), _writer(path)
    holder.execute("BEGIN IMMEDIATE")
    began = time.monotonic()
    with pytest.raises(sqlite3.OperationalError) as caught:
        begin_immediate(waiter, patience=0.3)
    assert time.monotonic() - began >= 0.3
    assert caught.value.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
    assert not waiter.in_transaction
    holder.execute("ROLLBACK")
    begin_immediate(waiter)  # free again: no wait
    waiter.execute("ROLLBACK")


def test_other_errors_are_not_waited_out(tmp_path: Path) -> None:
    db = _writer(tmp_path / "log.sqlite3")
    db.execute("BEGIN IMMEDIATE")
    began = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="within a transaction"):
        begin_immediate(db)  # already inside one: an error at once, not a busy wait
    assert time.monotonic() - began < 1.0
    db.execute("ROLLBACK")


def test_patient_statements_wait_in_sqlites_handler_and_the_connection_stays_impatient(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.sqlite3"
    holder, waiter = _writer(path), _writer(path)
    holder.execute("BEGIN IMMEDIATE")
    threading.Timer(0.2, lambda: holder.execute("COMMIT")).start()
    with patient(waiter):
        waiter.execute("INSERT INTO t VALUES (3)")  # autocommit: waits for the holder
    assert waiter.execute("PRAGMA busy_timeout").fetchone() == (0,)
