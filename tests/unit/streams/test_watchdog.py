"""The stream worker's liveness rule (streams.watchdog.ProgressWatch)."""

from __future__ import annotations

from streams.records import TopicPartition as TP
from streams.watchdog import ProgressWatch

A = TP("reef.inference", 0)
B = TP("reef.reports", 0)


def test_waiting_records_with_nothing_committed_stall_after_the_timeout() -> None:
    watch = ProgressWatch(stall_s=10.0)
    for now in range(0, 10, 2):
        assert watch.observe(float(now), {A: 3}, {A: 7}) == []
    (stall,) = watch.observe(10.0, {A: 3}, {A: 7})
    assert (stall.partition, stall.committed, stall.end, stall.seconds) == (A, 3, 7, 10.0)
    assert "4 records wait after offset 3" in stall.describe()


def test_a_moving_committed_offset_is_progress() -> None:
    watch = ProgressWatch(stall_s=10.0)
    for now in range(0, 40, 2):
        assert watch.observe(float(now), {A: now}, {A: 100}) == []


def test_a_caught_up_or_unknown_partition_never_stalls() -> None:
    watch = ProgressWatch(stall_s=10.0)
    for now in range(0, 40, 2):
        # A is at its end, B's end is unknown (the broker could not answer)
        assert watch.observe(float(now), {A: 7, B: 2}, {A: 7}) == []


def test_only_the_stalled_partition_is_named() -> None:
    # B keeps committing: that is no excuse for A
    watch = ProgressWatch(stall_s=4.0)
    stalls = []
    for now in range(0, 12, 2):
        stalls = watch.observe(float(now), {A: 3, B: now}, {A: 7, B: 100})
    assert [s.partition for s in stalls] == [A]


def test_a_gap_between_looks_is_not_held_against_the_partitions() -> None:
    # a suspended process: the next look comes long after the last one
    watch = ProgressWatch(stall_s=10.0)
    assert watch.observe(0.0, {A: 3}, {A: 7}) == []
    assert watch.observe(60.0, {A: 3}, {A: 7}) == []
    assert watch.observe(64.0, {A: 3}, {A: 7}) == []
    assert watch.observe(68.0, {A: 3}, {A: 7}) == []
    assert [s.partition for s in watch.observe(70.0, {A: 3}, {A: 7})] == [A]


def test_reset_forgets_the_clocks() -> None:
    watch = ProgressWatch(stall_s=4.0)
    for now in range(0, 4, 2):
        watch.observe(float(now), {A: 3}, {A: 7})
    watch.reset()  # a rebalance or a recovery
    assert watch.observe(4.0, {A: 3}, {A: 7}) == []
    assert watch.observe(6.0, {A: 3}, {A: 7}) == []
    assert watch.observe(8.0, {A: 3}, {A: 7}) != []


def test_a_partition_no_longer_assigned_is_forgotten() -> None:
    watch = ProgressWatch(stall_s=4.0)
    watch.observe(0.0, {A: 3}, {A: 7})
    watch.observe(2.0, {}, {})  # revoked
    assert watch.observe(4.0, {A: 3}, {A: 7}) == []
    assert watch.observe(6.0, {A: 3}, {A: 7}) == []
