"""Fuzzing fixtures: one ``reef serve`` (embedded log) behind the scripted upstream.

The embedded log is enough here: fuzzing exercises the HTTP edge (parsing, validation,
error mapping), which is the same code on both logs; the Kafka-specific paths are the
fault suite's subject. The server uses a small body limit so bodies "near the limit"
are cheap to generate, and a short upstream read timeout so nothing can hang for long.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reef.testing.servers import UpstreamProcess
from tests.support.fuzzing import MAX_BODY, UPSTREAM_READ_TIMEOUT_S
from tests.support.reef_server import (  # noqa: F401  (fixtures re-used by this package)
    ReefServer,
    _servers_stay_up,
    launch,
    upstream_fixture,
)


@pytest.fixture(scope="session")
def fuzz_server(
    upstream: UpstreamProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ReefServer]:
    server = launch(
        "embedded",
        upstream=upstream,
        state_dir=tmp_path_factory.mktemp("fuzz-state"),
        args=["--max-body-bytes", str(MAX_BODY)],
        env={"REEF_UPSTREAM_READ_TIMEOUT_S": str(UPSTREAM_READ_TIMEOUT_S)},
    )
    try:
        yield server
    finally:
        server.stop()
