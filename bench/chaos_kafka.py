"""The Kafka of bench/streams_chaos.py: :class:`PrivateKafka`, a single node or a
three-node cluster of the bench's own, on free ports under a temporary root (never the
shared stack other tests use), with SIGSTOP / SIGCONT / SIGKILL / restart of one node;
and the flags that point Reef's commands at it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

from reef.core import topics
from reef.testing.servers import free_port
from reef_dev.stack import kafka as stack_kafka
from reef_dev.stack import process as stack_process
from reef_dev.stack.paths import load_settings

#: the topics ``reef streams`` reads (the join: inference + reports; the chain: the rest)
INPUT_TOPICS = (topics.INFERENCE, topics.REPORTS, topics.SCENARIOS, topics.RELEASE_PROPOSALS)


def kafka_flags(bootstrap: str, prefix: str) -> list[str]:
    return ["--log", "kafka", "--kafka-bootstrap", bootstrap, "--kafka-topic-prefix", prefix]


class PrivateKafka:
    """``count`` combined broker+controller nodes on free ports under ``root``."""

    def __init__(self, root: Path, count: int, heap_mb: int = 384) -> None:
        self.settings = load_settings()
        install = stack_kafka.install_for(self.settings)
        shape = "single" if count == 1 else "cluster"
        ports: list[int] = []
        while len(ports) < 2 * count:
            port = free_port()
            if port not in ports:
                ports.append(port)
        nodes = tuple(
            stack_kafka.KafkaNode(
                shape=shape,
                node_id=i,
                broker_port=ports[2 * (i - 1)],
                controller_port=ports[2 * (i - 1) + 1],
                heap_mb=heap_mb,
                root=root / f"node-{i}",
                install=install,
            )
            for i in range(1, count + 1)
        )
        self.shape = stack_kafka.KafkaShape(name=shape, nodes=nodes, root=root)
        self.root = root

    @property
    def bootstrap(self) -> str:
        return self.shape.bootstrap

    @property
    def ids(self) -> list[int]:
        return [node.node_id for node in self.shape.nodes]

    def start(self, timeout: float = 300.0) -> None:
        for node in self.shape.nodes:
            stack_kafka.start_node(self.settings, self.shape, node)
        self.wait_all(timeout)

    def wait_all(self, timeout: float = 180.0) -> float:
        """Until every node answers metadata listing every node."""
        return stack_kafka.wait_for_brokers(
            [node.bootstrap for node in self.shape.nodes],
            set(self.ids),
            timeout=timeout,
            services=tuple(node.service for node in self.shape.nodes),
        )

    def pid(self, node_id: int) -> int:
        pid = self.shape.node(node_id).service.pid()
        if pid is None:
            raise RuntimeError(f"Kafka node {node_id} is not running")
        return pid

    def sigstop(self, node_id: int) -> None:
        os.kill(self.pid(node_id), signal.SIGSTOP)

    def sigcont(self, node_id: int) -> None:
        os.kill(self.pid(node_id), signal.SIGCONT)

    def kill(self, node_id: int) -> None:
        stack_process.kill(self.shape.node(node_id).service)

    def restart(self, node_id: int, timeout: float = 180.0) -> float:
        """Start a killed node again; seconds until every node lists every node."""
        began = time.monotonic()
        stack_kafka.start_node(self.settings, self.shape, self.shape.node(node_id))
        self.wait_all(timeout)
        return time.monotonic() - began

    def server_logs(self) -> list[Path]:
        return [node.logs_dir / "server.log" for node in self.shape.nodes]

    def close(self, keep_logs: Path | None = None) -> None:
        """Kill every node (SIGCONT first: a stopped one would not die), delete the data."""
        for node in self.shape.nodes:
            pid = node.service.pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            stack_process.kill(node.service)
        for node in self.shape.nodes:
            if keep_logs is not None and node.logs_dir.exists():
                target = keep_logs / f"kafka-node-{node.node_id}"
                shutil.copytree(node.logs_dir, target, dirs_exist_ok=True)
        shutil.rmtree(self.root, ignore_errors=True)
