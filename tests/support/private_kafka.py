"""A single-node Kafka broker of a test's own, to kill or stall without touching the
shared stack (tests/e2e/test_log_down.py, tests/faults/test_kafka_brokers.py).

Its ports are drawn below the kernel's ephemeral range: a port that bind-to-0 hands
out is free only for a moment, and any outgoing connection on the machine may take
it as its local port before the JVM binds it. A broker that still loses its port
to another process (its log says so) is started again on new ones; any other exit
fails with the broker's log.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

from reef_dev.stack import kafka as stack_kafka
from reef_dev.stack import process as stack_process
from reef_dev.stack.paths import load_settings
from reef_dev.stack.process import StackError

# Below Linux's default ephemeral range (32768-60999) and away from the shared
# stack's fixed ports (18xxx-19xxx).
PORT_RANGE = range(21000, 32000)
START_ATTEMPTS = 3
BIND_FAILURE = "Address already in use"


def unused_port(rng: random.Random) -> int:
    """A port in ``PORT_RANGE`` that nobody has bound now."""
    for _ in range(200):
        port = rng.choice(PORT_RANGE)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((stack_kafka.HOST, port))
            except OSError:
                continue
            return port
    raise StackError(f"no free port in {PORT_RANGE.start}-{PORT_RANGE.stop - 1}")


def _node(root: Path, rng: random.Random) -> stack_kafka.KafkaNode:
    broker_port = unused_port(rng)
    controller_port = unused_port(rng)
    while controller_port == broker_port:
        controller_port = unused_port(rng)
    return stack_kafka.KafkaNode(
        shape="single",
        node_id=1,
        broker_port=broker_port,
        controller_port=controller_port,
        heap_mb=256,
        root=root / "node-1",
        install=stack_kafka.install_for(load_settings()),
    )


def _remove(node: stack_kafka.KafkaNode, root: Path) -> None:
    pid = node.service.pid()
    if pid is not None:  # a stalled (SIGSTOPped) broker must run to die
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    stack_process.kill(node.service)
    shutil.rmtree(root, ignore_errors=True)


def _start(root: Path) -> stack_kafka.KafkaNode:
    settings = load_settings()
    rng = random.Random()
    for attempt in range(1, START_ATTEMPTS + 1):
        node = _node(root, rng)
        shape = stack_kafka.KafkaShape(name="single", nodes=(node,), root=root)
        try:
            stack_kafka.start_node(settings, shape, node)
            stack_kafka.wait_for_brokers(
                [node.bootstrap], {1}, timeout=180.0, services=(node.service,)
            )
            return node
        except StackError as exc:
            log = node.service.log_tail(200)
            _remove(node, root)
            if BIND_FAILURE not in f"{exc}\n{log}" or attempt == START_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


@contextlib.contextmanager
def private_broker(root: Path) -> Iterator[stack_kafka.KafkaNode]:
    """A running single-node Kafka under ``root``; killed and deleted after."""
    node = _start(root)
    try:
        yield node
    finally:
        _remove(node, root)
