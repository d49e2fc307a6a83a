"""Kafka down under a running ``reef serve``: Reef answers 503 and records nothing.

A Kafka broker of the test's own, killed while Reef serves on it (the check:
tests/support/log_down.py). The same check on the embedded log, a full disk under the
app in process, is tests/api/test_bad_input.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reef.testing.servers import UpstreamProcess, run_reef
from reef_dev.stack import process as stack_process
from tests.support.log_down import check_log_down
from tests.support.private_kafka import private_broker
from tests.support.reef_server import launch


@pytest.mark.kafka
@pytest.mark.slow
def test_log_down_is_503_kafka(
    upstream: UpstreamProcess, tmp_path: Path, kafka_bootstrap: str
) -> None:
    """A Kafka broker of its own, killed under a running Reef; Reef answers 503."""
    with private_broker(tmp_path / "kafka") as node:
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
