"""The stream worker's data directory: exclusive per worker, empty at start, removed at exit.

A slot held by a process that was SIGKILLed is free again (the kernel drops its flock),
and the next worker finds it empty: RocksDB files a killed worker left may hold table
writes of an aborted transaction, which must never be read (see streams/datadir.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from reef.settings import Settings
from streams.datadir import worker_data_dir
from streams.host import data_dir_base

REPO_ROOT = Path(__file__).resolve().parents[2]

HOLDER = r"""
import sys, time
from pathlib import Path
from streams.datadir import worker_data_dir

with worker_data_dir(Path(sys.argv[1])) as path:
    (path / "000012.sst").write_bytes(b"written by a worker killed mid-transaction")
    print(path, flush=True)
    time.sleep(600)
"""


def test_each_worker_gets_its_own_empty_slot_removed_at_exit(tmp_path: Path) -> None:
    base = tmp_path / "streams" / "app"
    with worker_data_dir(base) as first:
        assert first == base / "worker-0" and list(first.iterdir()) == []
        (first / "CURRENT").write_text("x")
        with worker_data_dir(base) as second:
            assert second == base / "worker-1"
            assert list(second.iterdir()) == []
        assert not second.exists()
        assert (first / "CURRENT").read_text() == "x"  # the other worker's files untouched
    assert not first.exists()
    with worker_data_dir(base) as again:
        assert again == base / "worker-0"


def test_a_killed_workers_slot_is_reused_and_emptied(tmp_path: Path) -> None:
    base = tmp_path / "app"
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(base)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        held = Path(child.stdout.readline().strip())
        assert held == base / "worker-0" and (held / "000012.sst").exists()
        with worker_data_dir(base) as other:  # held: the next slot
            assert other == base / "worker-1"
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
        assert (held / "000012.sst").exists()  # a kill leaves the files behind ...
        with worker_data_dir(base) as reused:
            assert reused == held
            assert list(reused.iterdir()) == []  # ... and the next worker never reads them
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()


def test_the_slots_live_under_the_state_dir_per_deployment(tmp_path: Path) -> None:
    one = data_dir_base(Settings.of(state_dir=tmp_path, kafka_topic_prefix="a-"))
    two = data_dir_base(Settings.of(state_dir=tmp_path, kafka_topic_prefix="b-"))
    assert one.parent == two.parent == tmp_path / "streams"
    assert one != two
