"""An OTLP receiver for local development and tests: an OpenTelemetry Collector.

The collector is built once from its Go modules, the way the OpenTelemetry Collector
Builder builds a distribution: ``reef_dev/stack/otelcol/`` holds the builder's manifest and
what it generated from it (``main.go``, ``components.go``, ``go.mod`` and ``go.sum``,
every module pinned), wiring the core ``otlpreceiver`` to the contrib ``fileexporter``.
The sources are copied into ``<stack home>/otelcol-<version>/src`` and built there with
``go build`` into ``reef-otelcol``; a stamp of the sources' hash beside the binary makes
a second ``scripts/stack up`` build nothing (and a changed manifest build again).

The collector receives OTLP over HTTP on 127.0.0.1:14318 (not the default 4318, which a
developer's own collector may hold) and writes every batch of spans it receives as one
line of OTLP JSON to ``<stack home>/run/otelcol/spans.jsonl``, which tests read.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import httpx

from reef_dev.stack import process
from reef_dev.stack.paths import StackSettings
from reef_dev.stack.process import Echo, StackError, no_echo

VERSION = "0.161.0"
SOURCES = ("builder.yaml", "go.mod", "go.sum", "main.go", "components.go")

HOST = "127.0.0.1"
PORT = 14318
#: the OTLP/HTTP base URL clients export to (spans go to ``/v1/traces`` under it)
LOCAL_ENDPOINT = f"http://{HOST}:{PORT}"


@dataclass(frozen=True)
class CollectorBuild:
    """The built collector in the stack home, and the hash of the sources it was built from."""

    root: Path

    @property
    def binary(self) -> Path:
        return self.root / "reef-otelcol"

    @property
    def stamp(self) -> Path:
        return self.root / ".reef-sources"

    def is_current(self, digest: str) -> bool:
        return self.binary.is_file() and self.stamp.is_file() and self.stamp.read_text() == digest


def build_for(settings: StackSettings) -> CollectorBuild:
    return CollectorBuild(settings.home / f"otelcol-{VERSION}")


def run_root(settings: StackSettings) -> Path:
    return settings.run_dir / "otelcol"


def spans_file(settings: StackSettings) -> Path:
    """Where the file exporter writes the spans it received, one OTLP JSON batch a line."""
    return run_root(settings) / "spans.jsonl"


def config_text(settings: StackSettings) -> str:
    """The collector's configuration: OTLP/HTTP in, JSON lines out, no telemetry port."""
    return f"""receivers:
  otlp:
    protocols:
      http:
        endpoint: {HOST}:{PORT}
exporters:
  file:
    path: {spans_file(settings)}
    format: json
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
"""


def service_for(settings: StackSettings) -> process.Service:
    root = run_root(settings)
    config = root / "config.yaml"
    return process.Service(
        name="otelcol",
        argv=(str(build_for(settings).binary), f"--config={config}"),
        workdir=root,
        log_file=root / "otelcol.log",
        pid_file=root / "otelcol.pid",
        marker=f"--config={config}",
    )


# ---------------------------------------------------------------------------
# Build


def _sources() -> dict[str, bytes]:
    folder = resources.files("reef_dev.stack") / "otelcol"
    return {name: (folder / name).read_bytes() for name in SOURCES}


def _digest(sources: dict[str, bytes]) -> str:
    hasher = hashlib.sha256()
    for name in SOURCES:
        hasher.update(name.encode() + b"\0" + sources[name] + b"\0")
    return hasher.hexdigest()


def ensure_built(settings: StackSettings, echo: Echo = no_echo) -> Path:
    """Build the collector from the pinned sources unless that build is already there."""
    sources = _sources()
    digest = _digest(sources)
    build = build_for(settings)
    if build.is_current(digest):
        return build.binary
    if shutil.which("go") is None:
        raise StackError("`go` is not on PATH; building the OpenTelemetry Collector needs Go")
    src = build.root / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for name, data in sources.items():
        (src / name).write_bytes(data)
    log = build.root / "build.log"
    started = time.monotonic()
    echo(f"Building the OpenTelemetry Collector {VERSION} into {build.binary} (log: {log})")
    partial = build.root / "reef-otelcol.partial"
    process.run_logged(
        ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), "."],
        label="go build",
        log_file=log,
        cwd=src,
        env={"GOWORK": "off", "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"},
        echo=echo,
    )
    partial.rename(build.binary)
    build.stamp.write_text(digest)
    took = process.format_elapsed(time.monotonic() - started)
    echo(f"OpenTelemetry Collector built in {took}: {build.binary}")
    return build.binary


# ---------------------------------------------------------------------------
# Readiness and lifecycle


def probe(endpoint: str) -> None:
    """Raise unless the OTLP/HTTP receiver at ``endpoint`` accepts an (empty) export."""
    response = httpx.post(
        f"{endpoint}/v1/traces",
        content=b"{}",
        headers={"content-type": "application/json"},
        timeout=5.0,
    )
    response.raise_for_status()


def wait_ready(
    endpoint: str,
    *,
    timeout: float = 60.0,
    services: tuple[process.Service, ...] = (),
    echo: Echo = no_echo,
) -> float:
    def ready() -> bool:
        if endpoint == LOCAL_ENDPOINT and not process.port_open(HOST, PORT):
            raise StackError(f"nothing listening at {HOST}:{PORT} yet")
        probe(endpoint)
        return True

    return process.wait_until(
        f"the OTLP receiver at {endpoint}", ready, timeout=timeout, services=services, echo=echo
    )


def up(settings: StackSettings, *, echo: Echo = no_echo, timeout: float = 60.0) -> str:
    """Build (first time) and start the collector unless it runs; return its OTLP endpoint."""
    with process.file_lock(settings.lock_file.with_name("otelcol.lock")):
        ensure_built(settings, echo)
        service = service_for(settings)
        spawned = not service.is_running()
        if spawned:
            process.require_free_ports(service, HOST, (PORT,))
            run_root(settings).mkdir(parents=True, exist_ok=True)
            (run_root(settings) / "config.yaml").write_text(config_text(settings))
            pid = process.spawn(service)
            echo(f"Started the OpenTelemetry Collector (pid {pid}); OTLP/HTTP on {LOCAL_ENDPOINT}")
        waited = wait_ready(LOCAL_ENDPOINT, timeout=timeout, services=(service,), echo=echo)
    if spawned:
        echo(f"OTLP receiver ready at {LOCAL_ENDPOINT} (waited {process.format_elapsed(waited)})")
    else:
        echo(f"OTLP receiver already running at {LOCAL_ENDPOINT}")
    return LOCAL_ENDPOINT


def down(settings: StackSettings, *, echo: Echo = no_echo) -> None:
    if process.stop(service_for(settings), timeout=20.0):
        echo("Stopped the OpenTelemetry Collector")


def wipe(settings: StackSettings) -> None:
    """Remove the stopped collector's received spans, configuration and logs."""
    if service_for(settings).is_running():
        raise StackError("the OpenTelemetry Collector is running; stop it first")
    shutil.rmtree(run_root(settings), ignore_errors=True)
