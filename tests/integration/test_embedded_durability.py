"""An acknowledged append to the embedded log survives SIGKILL of the writer.

A writer subprocess appends in a loop (several concurrent appenders, so group commit
is exercised) and prints every acknowledged position, flushing stdout each time. The
test SIGKILLs it after a random number of acks, reopens the log and checks that every
acknowledged record is there with identical bytes, then does it again on the same file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from reef.contracts.log import read_all
from reef.core.errors import EventValidationError
from reef.core.events import ReportRejected, ScenarioCreated, utc_now
from reef.core.topics import ALL_TOPICS, REPORTS, SAMPLES, SCENARIOS
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore

TOPIC = "durability"
PARTITIONS = 3
ROUNDS = 3

WRITER = r"""
import asyncio, hashlib, sys
from pathlib import Path
from reef.log.embedded import EmbeddedLog

def value(round_no, seq):
    seed = hashlib.sha256(f"{round_no}:{seq}".encode()).digest()
    return seed * (1 + seq % 40)

async def appender(log, round_no, worker, workers, out):
    seq = worker
    while True:
        key = f"key-{seq % 11}".encode()
        pos = await log.append(
            sys.argv[3], key, value(round_no, seq), [("seq", str(seq).encode())]
        )
        out.write(f"{seq} {pos.partition} {pos.offset}\n")
        out.flush()
        seq += workers

async def main():
    log = EmbeddedLog(Path(sys.argv[1]), partitions=int(sys.argv[4]))
    await log.start()
    await log.ensure_topics([sys.argv[3]])
    print("ready", flush=True)
    workers = 4
    await asyncio.gather(*(appender(log, int(sys.argv[2]), w, workers, sys.stdout)
                           for w in range(workers)))

asyncio.run(main())
"""


def expected_value(round_no: int, seq: int) -> bytes:
    seed = hashlib.sha256(f"{round_no}:{seq}".encode()).digest()
    return seed * (1 + seq % 40)


def run_writer_until_killed(
    path: Path, round_no: int, acks_wanted: int
) -> list[tuple[int, int, int]]:
    """Start the writer, read ``acks_wanted`` acks, SIGKILL it; return (seq, partition, offset)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(round_no), TOPIC, str(PARTITIONS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    acks: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + 60
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        while len(acks) < acks_wanted:
            assert time.monotonic() < deadline, "writer too slow"
            line = proc.stdout.readline()
            assert line, f"writer died: {proc.stderr.read() if proc.stderr else ''}"
            seq, partition, offset = (int(x) for x in line.split())
            acks.append((seq, partition, offset))
    finally:
        proc.send_signal(signal.SIGKILL)
        # acks printed after the ones we counted are acknowledged too: keep them
        rest, _ = proc.communicate(timeout=30)
    for line in rest.split("\n")[:-1]:  # the piece after the last newline may be cut short
        seq, partition, offset = (int(x) for x in line.split())
        acks.append((seq, partition, offset))
    assert proc.returncode == -signal.SIGKILL
    return acks


@pytest.mark.slow
async def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    rng = random.Random(0xD0AB1E)
    acknowledged: dict[tuple[int, int], tuple[int, int]] = {}  # position -> (round, seq)
    for round_no in range(ROUNDS):
        acks = run_writer_until_killed(path, round_no, rng.randrange(50, 400))
        for seq, partition, offset in acks:
            assert (partition, offset) not in acknowledged, "an offset was handed out twice"
            acknowledged[(partition, offset)] = (round_no, seq)

        log = EmbeddedLog(path, partitions=PARTITIONS)
        await log.start()
        try:
            records = await read_all(log, TOPIC)
            ends = await log.end_offsets(TOPIC)
        finally:
            await log.close()
        stored = {(r.partition, r.offset): r for r in records}
        for position, (ack_round, seq) in acknowledged.items():
            assert position in stored, f"acknowledged append {position} (round {ack_round}) lost"
            record = stored[position]
            assert record.value == expected_value(ack_round, seq), position
            assert record.headers == (("seq", str(seq).encode()),)
            assert record.key == f"key-{seq % 11}".encode()
        # offsets stay dense: nothing half-written, no holes
        per_partition: dict[int, list[int]] = defaultdict(list)
        for partition, offset in stored:
            per_partition[partition].append(offset)
        for partition, offsets in per_partition.items():
            assert sorted(offsets) == list(range(len(offsets)))
            assert ends[partition] == len(offsets)
    assert len(acknowledged) >= 50 * ROUNDS


async def test_an_invalid_event_writes_nothing(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "log.sqlite3", partitions=PARTITIONS)
    await log.start()
    try:
        await log.ensure_topics(list(ALL_TOPICS))
        store = EventStore(log)
        good = ScenarioCreated(
            event_id="e1",
            scenario="s",
            occurred_at=utc_now(),
            producer="p",
            recipe="core",
            initial_release_id="r0",
        )
        bad = ReportRejected(
            event_id="e2",
            scenario="s",
            occurred_at=utc_now(),
            producer="p",
            report_id="r",
            reason=None,  # type: ignore[arg-type]
        )
        with pytest.raises(EventValidationError) as info:
            await store.append(bad)
        assert info.value.field == "reason"
        with pytest.raises(EventValidationError):
            await store.append_all([good, bad, good])
        wrong_time = dataclasses.replace(good, occurred_at="yesterday")  # type: ignore[arg-type]
        with pytest.raises(EventValidationError):
            await store.append_all([good, wrong_time])
        for topic in (SCENARIOS, REPORTS, SAMPLES):
            assert await log.end_offsets(topic) == dict.fromkeys(range(PARTITIONS), 0)
            assert await read_all(log, topic) == []

        position = await store.append(good)  # the log still works afterwards
        assert (position.topic, position.offset) == (SCENARIOS, 0)
    finally:
        await log.close()
