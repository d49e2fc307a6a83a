"""Pytest fixtures for the local Kafka + S3 stack (see reef_dev/stack).

Register it once, in tests/conftest.py::

    pytest_plugins = ["tests.stack_plugin"]

Services start lazily, once per session, the first time a test asks for a
fixture; they keep running after the session (``scripts/stack down`` stops them),
so later runs reuse them. ``REEF_TEST_KAFKA_BOOTSTRAP`` and
``REEF_TEST_S3_ENDPOINT`` (with ``REEF_TEST_S3_ACCESS_KEY``,
``REEF_TEST_S3_SECRET_KEY``, ``REEF_TEST_S3_BUCKET``) point the tests at
services that are already running instead (when they name this stack's own
addresses, as ``eval "$(scripts/stack env)"`` does, the fixtures manage the local
services as usual, so ``s3.stop()`` and broker restarts still work). A stack
that cannot be started or reached fails the tests that need it; it never
skips them.

Fixtures:

* ``kafka_bootstrap`` (session) -> ``str``: the single node, ``127.0.0.1:19092``.
* ``kafka_cluster`` (session) -> :class:`KafkaCluster`: three nodes, with
  ``bootstrap`` and ``brokers`` (each with ``node_id``, ``port``, ``kill()``,
  ``stop()``, ``start()``). Brokers a test leaves down are restarted after it.
* ``s3`` (session) -> :class:`S3Server`: ``endpoint``, ``access_key``,
  ``secret_key``, ``bucket``, ``region``, ``client()``, ``stop()``, ``start()``.
* ``schema_registry_url`` (session) -> ``str``: the Confluent-compatible API of the
  local schema registry (Apicurio), ``http://127.0.0.1:18081/apis/ccompat/v7``
  (``REEF_TEST_SCHEMA_REGISTRY_URL`` points at another one instead).
* ``otlp_receiver`` (session) -> :class:`~tests.support.otlp.OtlpReceiver`: the local
  OpenTelemetry Collector's OTLP/HTTP ``endpoint`` (``http://127.0.0.1:14318``) and
  ``spans()``, what its file exporter wrote (built and started if needed).
* ``new_topic_name`` (function) -> ``Callable[..., str]``: ``new_topic_name(prefix="t")``
  gives a unique, legal topic name (topics are not auto-created: create them).
"""

from __future__ import annotations

import itertools
import re
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest

from reef_dev.stack import collector, kafka, registry, seaweed
from reef_dev.stack.paths import StackSettings, load_settings
from reef_dev.stack.process import Echo, StackError
from tests.support.otlp import OtlpReceiver
from tests.support.stack import KafkaBroker, KafkaCluster, S3Server

_CLUSTER_KEY = pytest.StashKey["KafkaCluster"]()
_S3_KEY = pytest.StashKey["S3Server"]()


def _echo_for(config: pytest.Config) -> Echo:
    """Progress lines (builds, downloads, waits) shown even while output is captured."""
    capman = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")

    def echo(message: str) -> None:
        if capman is None or reporter is None:
            print(message, file=sys.stderr)
            return
        with capman.global_and_fixture_disabled():
            reporter.write_line(f"[scripts/stack] {message}")

    return echo


@pytest.fixture(scope="session")
def reef_stack_settings() -> StackSettings:
    return load_settings()


@pytest.fixture(scope="session")
def reef_stack_echo(pytestconfig: pytest.Config) -> Echo:
    return _echo_for(pytestconfig)


# ---------------------------------------------------------------------------
# Kafka


@pytest.fixture(scope="session")
def kafka_bootstrap(reef_stack_settings: StackSettings, reef_stack_echo: Echo) -> str:
    """Bootstrap servers of the single-node Kafka (started if needed)."""
    external = reef_stack_settings.external_kafka_bootstrap
    local = kafka.shape_for(reef_stack_settings, "single").bootstrap
    try:
        if external is not None and external != local:
            ids = kafka.broker_ids_eventually(external, timeout=60.0)
            reef_stack_echo(f"using Kafka at {external} (brokers {sorted(ids)})")
            return external
        return kafka.up(reef_stack_settings, "single", echo=reef_stack_echo).bootstrap
    except StackError as exc:
        pytest.fail(f"Kafka is not available: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def kafka_cluster(
    request: pytest.FixtureRequest,
    reef_stack_settings: StackSettings,
    reef_stack_echo: Echo,
) -> KafkaCluster:
    """The local three-node Kafka cluster (started if needed)."""
    try:
        shape = kafka.up(reef_stack_settings, "cluster", echo=reef_stack_echo)
    except StackError as exc:
        pytest.fail(f"the Kafka cluster is not available: {exc}", pytrace=False)
    brokers = tuple(
        KafkaBroker(
            node_id=node.node_id,
            port=node.broker_port,
            _settings=reef_stack_settings,
            _shape=shape,
            _echo=reef_stack_echo,
        )
        for node in shape.nodes
    )
    cluster = KafkaCluster(
        bootstrap=shape.bootstrap, brokers=brokers, _settings=reef_stack_settings
    )
    request.config.stash[_CLUSTER_KEY] = cluster
    return cluster


# ---------------------------------------------------------------------------
# S3


@pytest.fixture(scope="session")
def s3(
    request: pytest.FixtureRequest,
    reef_stack_settings: StackSettings,
    reef_stack_echo: Echo,
) -> S3Server:
    """The S3-compatible store, with bucket ``bucket`` present (started if needed)."""
    settings = reef_stack_settings
    local = seaweed.LOCAL_ENDPOINT
    try:
        external = settings.external_s3_endpoint
        if external is not None and external.rstrip("/") != local.endpoint:
            endpoint = seaweed.S3Endpoint(
                endpoint=external,
                access_key=settings.external_s3_access_key or local.access_key,
                secret_key=settings.external_s3_secret_key or local.secret_key,
                bucket=settings.external_s3_bucket or local.bucket,
            )
            seaweed.wait_ready(endpoint, timeout=60.0, echo=reef_stack_echo)
            managed = False
        else:
            endpoint = seaweed.up(settings, echo=reef_stack_echo)
            managed = True
    except StackError as exc:
        pytest.fail(f"S3 is not available: {exc}", pytrace=False)
    server = S3Server(
        endpoint=endpoint.endpoint,
        access_key=endpoint.access_key,
        secret_key=endpoint.secret_key,
        bucket=endpoint.bucket,
        region=endpoint.region,
        managed=managed,
        _settings=settings,
        _echo=reef_stack_echo,
    )
    if managed:
        request.config.stash[_S3_KEY] = server
    return server


# ---------------------------------------------------------------------------
# Schema registry


@pytest.fixture(scope="session")
def schema_registry_url(reef_stack_settings: StackSettings, reef_stack_echo: Echo) -> str:
    """The schema registry's Confluent-compatible API base URL (started if needed)."""
    external = reef_stack_settings.external_schema_registry_url
    try:
        if external is not None and external.rstrip("/") != registry.LOCAL_URL:
            registry.wait_ready(external, timeout=60.0, echo=reef_stack_echo)
            return external.rstrip("/")
        return registry.up(reef_stack_settings, echo=reef_stack_echo)
    except StackError as exc:
        pytest.fail(f"the schema registry is not available: {exc}", pytrace=False)


# ---------------------------------------------------------------------------
# OTLP receiver


@pytest.fixture(scope="session")
def otlp_receiver(reef_stack_settings: StackSettings, reef_stack_echo: Echo) -> OtlpReceiver:
    """The local OpenTelemetry Collector (built and started if needed); tests read the
    spans its file exporter wrote, so it is always this stack's own."""
    try:
        endpoint = collector.up(reef_stack_settings, echo=reef_stack_echo)
    except StackError as exc:
        pytest.fail(f"the OTLP receiver is not available: {exc}", pytrace=False)
    return OtlpReceiver(endpoint, collector.spans_file(reef_stack_settings))


# ---------------------------------------------------------------------------
# Per-test helpers


@pytest.fixture(autouse=True)
def _reef_stack_heal(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test, bring back brokers / the S3 server it left stopped."""
    yield
    names = request.fixturenames
    if "kafka_cluster" in names:
        cluster = request.config.stash.get(_CLUSTER_KEY, None)
        if cluster is not None and not all(b.is_running() for b in cluster.brokers):
            cluster.heal()
    if "s3" in names:
        server = request.config.stash.get(_S3_KEY, None)
        if server is not None and not server.is_running():
            server.start()


_topic_counter = itertools.count()


@pytest.fixture
def new_topic_name(request: pytest.FixtureRequest) -> Callable[..., str]:
    """A factory of unique, legal Kafka topic names: ``new_topic_name(prefix="t")``."""
    test = re.sub(r"[^A-Za-z0-9-]+", "-", request.node.name).strip("-")[:60]

    def make(prefix: str = "t") -> str:
        clean = re.sub(r"[^A-Za-z0-9-]+", "-", prefix).strip("-")[:40] or "t"
        return f"{clean}.{test}.{next(_topic_counter)}.{uuid.uuid4().hex[:8]}"

    return make
