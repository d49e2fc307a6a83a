"""``scripts/stack`` (``python -m reef_dev.stack``): start, stop and inspect the local Kafka
+ S3 + schema registry + OTLP stack."""

from __future__ import annotations

import logging
import shlex
import sys

import click

from reef_dev.stack import collector, kafka, process, registry, seaweed
from reef_dev.stack.paths import (
    ENV_STACK_HOME,
    ENV_TEST_KAFKA_BOOTSTRAP,
    ENV_TEST_OTLP_ENDPOINT,
    ENV_TEST_S3_ACCESS_KEY,
    ENV_TEST_S3_BUCKET,
    ENV_TEST_S3_ENDPOINT,
    ENV_TEST_S3_SECRET_KEY,
    ENV_TEST_SCHEMA_REGISTRY_URL,
    load_settings,
)
from reef_dev.stack.process import StackError


def _echo(message: str) -> None:
    click.echo(message, err=True)


@click.group()
def stack() -> None:
    """Local Kafka (KRaft), S3 (SeaweedFS), a schema registry (Apicurio) and an OTLP
    receiver (the OpenTelemetry Collector) for development.

    Installs into $REEF_STACK_HOME (default ~/.cache/reef-stack).
    """


@stack.command()
@click.option(
    "--kafka/--no-kafka", "with_kafka", default=True, show_default=True, help="Start Kafka."
)
@click.option(
    "--cluster",
    is_flag=True,
    help="Start the three-node Kafka cluster (29092/29094/29096) instead of the single node.",
)
@click.option(
    "--s3/--no-s3", "with_s3", default=True, show_default=True, help="Start SeaweedFS S3."
)
@click.option(
    "--registry/--no-registry",
    "with_registry",
    default=True,
    show_default=True,
    help="Start the Confluent-compatible schema registry (Apicurio).",
)
@click.option(
    "--otlp/--no-otlp",
    "with_otlp",
    default=True,
    show_default=True,
    help="Start the OTLP receiver (an OpenTelemetry Collector, built on first run).",
)
def up(
    with_kafka: bool, cluster: bool, with_s3: bool, with_registry: bool, with_otlp: bool
) -> None:
    """Install what is missing, start the services, wait until they answer."""
    # Readiness probes see refused connections while brokers boot; aiokafka logs each one.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    settings = load_settings()
    try:
        if with_registry:  # its JVM boots while Kafka and S3 start; waited for last
            registry.launch(settings, echo=_echo)
        if with_kafka:
            kafka.up(settings, "cluster" if cluster else "single", echo=_echo)
        if with_s3:
            seaweed.up(settings, echo=_echo)
        if with_otlp:
            collector.up(settings, echo=_echo)
        if with_registry:
            registry.up(settings, echo=_echo)
    except StackError as exc:
        raise click.ClickException(str(exc)) from exc


@stack.command()
@click.option("--wipe", is_flag=True, help="Also delete data and logs (keeps jars and binary).")
def down(wipe: bool) -> None:
    """Stop every service of the stack (SIGTERM, then SIGKILL)."""
    settings = load_settings()
    services = [svc for shape in kafka.SHAPES for svc in kafka.services(settings, shape)]
    services.append(seaweed.service_for(settings))
    services.append(registry.service_for(settings))
    services.append(collector.service_for(settings))
    stopped = process.stop_all(services, timeout=30.0)
    for service in stopped:
        _echo(f"Stopped {service.name}")
    if not stopped:
        _echo("Nothing was running")
    if wipe:
        for shape in kafka.SHAPES:
            kafka.wipe(settings, shape)
        seaweed.wipe(settings)
        registry.wipe(settings)
        collector.wipe(settings)
        _echo(f"Wiped data and logs under {settings.run_dir}")


@stack.command()
@click.option("--quiet", "-q", is_flag=True, help="Print nothing; only the exit status.")
def status(quiet: bool) -> None:
    """Show what is installed and running.

    Exits 0 when the single Kafka node and S3 are running, 1 otherwise (the schema
    registry and the OTLP receiver are shown but not required: a stack started before
    they existed still counts).
    """
    settings = load_settings()

    def say(line: str) -> None:
        if not quiet:
            click.echo(line)

    install = kafka.install_for(settings)
    jars = "installed" if install.complete_marker.exists() else "not installed"
    weed = seaweed.binary_path(settings)
    say(f"stack home: {settings.home}")
    say(f"kafka {kafka.KAFKA_VERSION} jars: {jars} ({install.libs})")
    say(f"seaweedfs binary: {'built' if weed.is_file() else 'not built'} ({weed})")
    apicurio = registry.install_for(settings)
    unpacked = "installed" if apicurio.is_complete() else "not installed"
    say(f"apicurio registry {registry.VERSION}: {unpacked} ({apicurio.root})")
    otelcol = collector.build_for(settings).binary
    built = "built" if otelcol.is_file() else "not built"
    say(f"opentelemetry collector {collector.VERSION}: {built} ({otelcol})")
    default_up = True
    for shape_name in kafka.SHAPES:
        shape = kafka.shape_for(settings, shape_name)
        for node in shape.nodes:
            pid = node.service.pid()
            if shape_name == "single" and pid is None:
                default_up = False
            state = f"running (pid {pid})" if pid else "stopped"
            say(
                f"kafka {shape_name} node {node.node_id}: {state}, broker {node.bootstrap}, "
                f"controller {kafka.HOST}:{node.controller_port}, log {node.logs_dir}"
            )
    service = seaweed.service_for(settings)
    pid = service.pid()
    default_up = default_up and pid is not None
    state = f"running (pid {pid})" if pid else "stopped"
    endpoint = seaweed.LOCAL_ENDPOINT.endpoint
    say(f"s3 (seaweedfs): {state}, {endpoint}, log {service.log_file}")
    reg = registry.service_for(settings)
    reg_pid = reg.pid()
    state = f"running (pid {reg_pid})" if reg_pid else "stopped"
    say(f"schema registry (apicurio): {state}, {registry.LOCAL_URL}, log {reg.log_file}")
    otlp = collector.service_for(settings)
    otlp_pid = otlp.pid()
    state = f"running (pid {otlp_pid})" if otlp_pid else "stopped"
    say(
        f"otlp receiver (opentelemetry collector): {state}, {collector.LOCAL_ENDPOINT}, "
        f"spans {collector.spans_file(settings)}, log {otlp.log_file}"
    )
    if not default_up:
        sys.exit(1)


@stack.command()
def env() -> None:
    """Print `export` lines for the local stack (eval "$(scripts/stack env)")."""
    settings = load_settings()
    single = kafka.shape_for(settings, "single")
    cluster = kafka.shape_for(settings, "cluster")
    s3 = seaweed.LOCAL_ENDPOINT
    values = {
        ENV_STACK_HOME: str(settings.home),
        ENV_TEST_KAFKA_BOOTSTRAP: single.bootstrap,
        ENV_TEST_S3_ENDPOINT: s3.endpoint,
        ENV_TEST_S3_ACCESS_KEY: s3.access_key,
        ENV_TEST_S3_SECRET_KEY: s3.secret_key,
        ENV_TEST_S3_BUCKET: s3.bucket,
        ENV_TEST_SCHEMA_REGISTRY_URL: registry.LOCAL_URL,
        ENV_TEST_OTLP_ENDPOINT: collector.LOCAL_ENDPOINT,
    }
    for name, value in values.items():
        click.echo(f"export {name}={shlex.quote(value)}")
    click.echo(f"# three-node Kafka cluster (scripts/stack up --cluster): {cluster.bootstrap}")
    if not any(node.is_running() for node in single.nodes):
        _echo("note: the single Kafka node is not running (scripts/stack up)")
    if not seaweed.service_for(settings).is_running():
        _echo("note: SeaweedFS is not running (scripts/stack up)")
    if not registry.service_for(settings).is_running():
        _echo("note: the schema registry is not running (scripts/stack up)")
    if not collector.service_for(settings).is_running():
        _echo("note: the OTLP receiver is not running (scripts/stack up)")


def main() -> None:  # pragma: no cover - `python -m reef_dev.stack`
    stack(prog_name="scripts/stack")
