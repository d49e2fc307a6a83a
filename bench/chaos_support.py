"""The moving parts of ``bench/streams_chaos.py``, one module each, re-exported here.

* :class:`PrivateKafka` (bench/chaos_kafka.py): a single node or a three-node cluster of
  the bench's own, on free ports under a temporary root (never the shared stack other
  tests use), with SIGSTOP / SIGCONT / SIGKILL / restart of one node;
* :class:`Supervisor` (bench/chaos_workers.py): ``reef streams`` workers, each with a
  distinct ``--instance-id``, restarted when they exit on their own (status 75: the host
  gave up on a transaction or its watchdog ended it; any other status is a crash and
  counted apart);
* :class:`WedgeMonitor` (bench/chaos_monitor.py): the group seen from outside, once a
  second (its state, which live worker process owns each input partition, committed and
  end offsets, read_committed). A *wedge* is an input partition owned by a live worker of
  a stable group, with records waiting (end offset > committed offset) and the committed
  offset standing still for ``stall_s``: the rule of :mod:`streams.watchdog`, computed
  here with no help from it. A wedge that lasts ``kill_after_s`` is ended with SIGKILL
  (the supervisor restarts it);
* :class:`Ledger` (bench/chaos_ledger.py): reads the log incrementally and checks what the
  clients were told against it (every acknowledged receipt and report on the log, one
  fate per report, no sample twice).
"""

from __future__ import annotations

from bench.chaos_kafka import INPUT_TOPICS, PrivateKafka, kafka_flags
from bench.chaos_ledger import CheckResult, Ledger, cut_for, tail_lines
from bench.chaos_monitor import (
    NoProgress,
    Observation,
    Wedge,
    WedgeMonitor,
    instance_of,
    no_progress_incidents,
)
from bench.chaos_workers import Echo, Exit, Supervisor, Worker, first_error_line

__all__ = [
    "INPUT_TOPICS",
    "CheckResult",
    "Echo",
    "Exit",
    "Ledger",
    "NoProgress",
    "Observation",
    "PrivateKafka",
    "Supervisor",
    "Wedge",
    "WedgeMonitor",
    "Worker",
    "cut_for",
    "first_error_line",
    "instance_of",
    "kafka_flags",
    "no_progress_incidents",
    "tail_lines",
]
