"""End-to-end fixtures: ``reef serve`` as a real process on loopback, on both event logs.

* ``upstream`` (session): the scripted provider stand-in (reef/testing/scripted_upstream.py).
* ``harness_server`` (session): one embedded ``reef serve`` on ``upstream`` whose
  scenarios start from tests/support/harness_install.SEED, shared by the harness install
  and reef-client modules.
* ``harness_upstream`` (session): the harness agent world's stand-in
  (reef/testing/harness_upstream.py), shared by the ``harness_evolve`` and ``gepa`` modules.
* ``log_kind`` (module, parametrized ``embedded`` / ``kafka``; the Kafka case is marked
  ``kafka`` and uses the ``kafka_bootstrap`` broker from tests/stack_plugin.py).
* ``reef_factory`` (module): starts servers on the module's log kind, stopped at module end.
* ``reef_server`` (module): ``reef_factory(**reef_options)``; a module overrides the
  ``reef_options`` fixture to configure its server.
* ``operations_deployment`` / ``operations_history`` (package): one embedded deployment and
  its workload, shared by the operations modules (audit, export).
* ``copy_warm_start_dir`` (session): the warm-started tiny model the grpo and sao learning
  tests start their scenarios from (tests/support/learning_loop.copy_warm_start), built once.
* ``learning_log`` (module): on Kafka, one topic prefix and ``reef streams`` worker shared
  by the module's learning deployments (tests/support/learning.KafkaLearningLog); None on
  the embedded log.

The Kafka topics are shared by every test and every run, so a :class:`ReefServer` reads
the log only from the end offsets it saw before it started, and tests use unique
scenario names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reef.testing.servers import (
    UpstreamProcess,
    run_reef,
    running_upstream,
)
from tests.support.deployment import Deployment
from tests.support.harness_install import SEED, write_tree
from tests.support.learning import KafkaLearningLog, kafka_learning_log
from tests.support.learning_loop import copy_warm_start
from tests.support.operations import History, embedded_deployment, run_workload
from tests.support.reef_server import (  # noqa: F401  (fixtures, found by pytest here)
    LOG_KINDS,
    ReefFactory,
    ReefServer,
    _servers_stay_up,
    launch,
    upstream_fixture,
)
from tests.support.rollouts_deployment import rollouts_deployment

# ---------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def kafka_topics(kafka_bootstrap: str) -> str:
    """The broker's bootstrap, once ``reef topics create`` made Reef's topics there."""
    result = run_reef("topics", "create", "--log", "kafka", "--kafka-bootstrap", kafka_bootstrap)
    assert result.returncode == 0, f"reef topics create failed:\n{result.stdout}\n{result.stderr}"
    return kafka_bootstrap


@pytest.fixture(scope="package")
def operations_deployment(
    upstream: UpstreamProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """One embedded deployment shared by the operations modules (audit, export)."""
    with embedded_deployment(upstream, tmp_path_factory.mktemp("ops-embedded")) as dep:
        yield dep


@pytest.fixture(scope="package")
def operations_history(operations_deployment: Deployment) -> History:
    """The operations workload, run once on :func:`operations_deployment`."""
    return run_workload(operations_deployment, "ops")


@pytest.fixture(
    scope="package", params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)]
)
def rollouts_dep(
    request: pytest.FixtureRequest,
    upstream: UpstreamProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    """One rollouts deployment per log, shared by the rollout modules (canary and shadow:
    each test makes its own scenarios; tests/support/rollouts_deployment.py)."""
    bootstrap = request.getfixturevalue("kafka_bootstrap") if request.param == "kafka" else None
    work = tmp_path_factory.mktemp(f"rollouts-{request.param}")
    with rollouts_deployment(request.param, upstream, work, bootstrap) as deployment:
        yield deployment


@pytest.fixture(scope="module", params=LOG_KINDS)
def log_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture(scope="module")
def reef_factory(
    request: pytest.FixtureRequest,
    log_kind: str,
    upstream: UpstreamProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ReefFactory]:
    """Starts servers on the module's log kind (keywords of :func:`launch`)."""
    started: list[ReefServer] = []
    bootstrap = request.getfixturevalue("kafka_topics") if log_kind == "kafka" else None

    def start(**options: Any) -> ReefServer:
        options.setdefault("kafka_bootstrap", bootstrap)
        options.setdefault("state_dir", tmp_path_factory.mktemp(f"state-{log_kind}"))
        server = launch(log_kind, upstream=upstream, **options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def reef_options() -> dict[str, Any]:
    """Override in a module to configure its ``reef_server`` (``reef_factory`` keywords)."""
    return {}


@pytest.fixture(scope="module")
def reef_server(reef_factory: ReefFactory, reef_options: dict[str, Any]) -> ReefServer:
    return reef_factory(**reef_options)


@pytest.fixture(scope="session")
def copy_warm_start_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The warm-started creation weights, built once per run (read only by the servers)."""
    return copy_warm_start(tmp_path_factory.mktemp("copy-warm-start"))


@pytest.fixture(scope="module")
def learning_log(
    request: pytest.FixtureRequest, log_kind: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaLearningLog | None]:
    """On Kafka, the topics and ``reef streams`` worker of the module's learning tests: their
    deployments differ only in scenario, recipe and trainer group, and each starts its own
    ``reef serve`` and ``reef trainer`` on it. None on the embedded log."""
    if log_kind != "kafka":
        yield None
        return
    bootstrap: str = request.getfixturevalue("kafka_bootstrap")
    with kafka_learning_log(bootstrap, tmp_path_factory.mktemp("learning-kafka")) as shared:
        yield shared


@pytest.fixture(scope="session")
def harness_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    """The harness agent world's stand-in (reef/testing/harness_upstream.py), shared by the
    ``harness_evolve`` and ``gepa`` modules on both logs (a test counts the requests
    made after a baseline it takes)."""
    with running_upstream(
        tmp_path_factory.mktemp("harness-upstream"), module="reef.testing.harness_upstream"
    ) as process:
        yield process


@pytest.fixture(scope="session")
def harness_server(
    upstream: UpstreamProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReefServer]:
    """One embedded ``reef serve`` whose scenarios start from the harness seed, shared by
    the harness install and reef-client modules (each test uses scenarios of its own)."""
    seed = write_tree(tmp_path_factory.mktemp("harness-seed"), SEED)
    server = launch(
        "embedded",
        upstream=upstream,
        state_dir=tmp_path_factory.mktemp("harness-server"),
        env={"REEF_SEED_DIR": str(seed)},
    )
    yield server
    server.stop()
