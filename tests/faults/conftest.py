"""Fixtures and helpers of the fault suite (see tests/faults/__init__.py for the plan).

* ``upstream`` (session): the scripted provider stand-in.
* ``fault_table`` (session): ``record(FaultRow)`` prints one ``FAULT-TABLE`` line and
  appends the row (JSON) to ``<tmp>/reef-faults/fault-table.jsonl``.
* ``kafka_prefix`` (function): ``kafka_prefix(bootstrap)`` creates Reef's topics under a
  fresh prefix on that cluster and deletes them after the test.
* ``streams_worker`` (function): makes :class:`tests.support.faults.StreamsWorker`
  (``reef streams`` on Kafka in its own work dir, killable), stopped after the test.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reef.log.kafka import delete_prefixed_topics
from reef.testing.servers import run_reef
from tests.support.faults import TABLE_FILE, FaultTable, StreamsWorker, kafka_flags
from tests.support.reef_server import upstream_fixture  # noqa: F401  (a fixture, found here)


@pytest.fixture(scope="session")
def fault_table(pytestconfig: pytest.Config) -> FaultTable:
    """Rows go to the terminal even while output is captured (and to ``TABLE_FILE``)."""
    capman = pytestconfig.pluginmanager.getplugin("capturemanager")
    reporter = pytestconfig.pluginmanager.getplugin("terminalreporter")

    def echo(line: str) -> None:
        if capman is None or reporter is None:
            print(line, flush=True)
            return
        with capman.global_and_fixture_disabled():
            reporter.write_line(line)

    return FaultTable(TABLE_FILE, echo)


@pytest.fixture
def kafka_prefix() -> Iterator[Callable[[str], str]]:
    """``kafka_prefix(bootstrap)``: a fresh topic prefix with Reef's topics created."""
    made: list[tuple[str, str]] = []

    def make(bootstrap: str) -> str:
        prefix = f"t-fault-{uuid.uuid4().hex[:10]}-"
        created = run_reef("topics", "create", *kafka_flags(bootstrap, prefix), timeout=120)
        assert created.returncode == 0, f"reef topics create:\n{created.stdout}\n{created.stderr}"
        made.append((bootstrap, prefix))
        return prefix

    yield make
    for bootstrap, prefix in made:
        try:
            asyncio.run(asyncio.wait_for(delete_prefixed_topics(bootstrap, prefix), 60))
        except Exception as exc:  # cleanup must not hide the test's own outcome
            print(f"could not delete topics {prefix}* on {bootstrap}: {exc!r}")


@pytest.fixture
def streams_worker(tmp_path: Path) -> Iterator[Callable[[str, str], StreamsWorker]]:
    workers: list[StreamsWorker] = []

    def make(bootstrap: str, prefix: str) -> StreamsWorker:
        worker = StreamsWorker(bootstrap, prefix, tmp_path / f"streams-{len(workers)}")
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.stop()
