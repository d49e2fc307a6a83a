"""Kafka down under a running ``reef serve``: Reef answers 503 and records nothing.

A Kafka broker of the test's own, killed while Reef serves on it (the check:
tests/support/log_down.py). The same check on the embedded log, a full disk under the
app in process, is tests/api/test_bad_input.py.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reef.testing.servers import UpstreamProcess, free_port, run_reef
from tests.support.log_down import check_log_down
from tests.support.reef_server import launch


@pytest.mark.kafka
@pytest.mark.slow
def test_log_down_is_503_kafka(
    upstream: UpstreamProcess, tmp_path: Path, kafka_bootstrap: str
) -> None:
    """A Kafka broker of its own, killed under a running Reef; Reef answers 503."""
    from reef_dev.stack import kafka as stack_kafka
    from reef_dev.stack import process as stack_process
    from reef_dev.stack.paths import load_settings

    settings = load_settings()
    node = stack_kafka.KafkaNode(
        shape="single",
        node_id=1,
        broker_port=free_port(),
        controller_port=free_port(),
        heap_mb=256,
        root=tmp_path / "kafka" / "node-1",
        install=stack_kafka.install_for(settings),
    )
    shape = stack_kafka.KafkaShape(name="single", nodes=(node,), root=tmp_path / "kafka")
    try:
        stack_kafka.start_node(settings, shape, node)
        wait_for_broker(node.bootstrap, lambda: node.is_running(), timeout=180.0)
        created = run_reef(
            "topics", "create", "--log", "kafka", "--kafka-bootstrap", node.bootstrap
        )
        assert created.returncode == 0, created.stderr
        server = launch(
            "kafka",
            upstream=upstream,
            state_dir=tmp_path / "state",
            kafka_bootstrap=node.bootstrap,
            # refused after 3 s instead of the default 10: the answer is the same 503
            env={"REEF_KAFKA_APPEND_TIMEOUT_S": "3"},
        )
        try:
            check_log_down(
                server, take_down=lambda: stack_process.kill(node.service), bring_back=None
            )
        finally:
            server.stop()
    finally:
        stack_process.kill(node.service)
        shutil.rmtree(shape.root, ignore_errors=True)


def wait_for_broker(bootstrap: str, alive: Callable[[], bool], timeout: float) -> None:
    from reef_dev.stack.kafka import broker_ids

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        assert alive(), "the test's own Kafka broker exited during start-up"
        try:
            if broker_ids(bootstrap):
                return
        except Exception as exc:  # not up yet: keep the last reason for the failure message
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"the test's own Kafka broker at {bootstrap} did not start: {last!r}")
