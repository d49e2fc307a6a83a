"""``reef serve`` and tokens at start-up: it refuses to start without one, and with
``--insecure`` serves without one and says so. What tokens and scopes let through, route
by route, is tests/api/test_auth.py (the same app, in process)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from reef.testing.servers import UpstreamProcess, clean_env, free_port, reef_executable
from tests.support.api import chat_body, unique_scenario
from tests.support.reef_server import launch


def test_refuses_to_start_without_a_token(
    log_kind: str, upstream: UpstreamProcess, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    args = [
        reef_executable(),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "--state-dir",
        str(tmp_path / "state"),
        "--log",
        log_kind,
        "--upstream-url",
        upstream.v1_url,
    ]
    if log_kind == "kafka":
        args += ["--kafka-bootstrap", request.getfixturevalue("kafka_topics")]
    process = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(),
    )
    try:
        output, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"reef serve kept running with no token:\n{output}")
    assert process.returncode != 0, output
    assert re.search(r"token", output, re.I), output
    assert re.search(r"insecure", output, re.I), output


def test_insecure_runs_without_a_token_and_warns(
    log_kind: str, upstream: UpstreamProcess, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    bootstrap = request.getfixturevalue("kafka_topics") if log_kind == "kafka" else None
    server = launch(
        log_kind,
        upstream=upstream,
        state_dir=tmp_path / "state",
        token=None,
        args=["--insecure"],
        kafka_bootstrap=bootstrap,
    )
    try:
        scenario = unique_scenario("insecure")
        with httpx.Client(base_url=server.base_url, timeout=30.0) as client:
            response = client.post(
                "/v1/chat/completions",
                json=chat_body("open"),
                headers={"x-reef-scenario": scenario},
            )
        assert response.status_code == 200, response.text
        time.sleep(0.2)
        output = server.process.managed.stdout_text() + server.process.managed.stderr_text()
        assert re.search(r"warn", output, re.I), output
        assert re.search(r"insecure|no token|without (a )?token|unauthenticated", output, re.I)
    finally:
        server.stop()
