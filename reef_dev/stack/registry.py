"""A Confluent-compatible schema registry for local development and tests: Apicurio Registry.

Apicurio Registry 3.0.9 (Apache-2.0) serves the Confluent Schema Registry API under
``/apis/ccompat/v7`` on 127.0.0.1:18081. Why this one: Confluent's own registry is not
on Maven Central and Karapace is not on PyPI, while Apicurio publishes its runnable
Quarkus distribution there (``io.apicurio:apicurio-registry-app:<v>:tar.gz:all``). 3.0.9
is the newest release that runs on Java 17, the stack's Java (3.3.x is compiled for 21).

The archive is fetched once with Maven (``dependency:copy``, so the machine's Maven
settings and local repository apply, as for Kafka) and unpacked into
``<stack home>/apicurio-registry-3.0.9``. Storage is Apicurio's SQL storage on an H2
*file* under ``<stack home>/run/schema-registry/data``, so schema ids survive a
restart like Kafka's data does (records may carry them), and ``stack down --wipe``
removes both together.
"""

from __future__ import annotations

import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from reef_dev.stack import process
from reef_dev.stack.paths import StackSettings
from reef_dev.stack.process import Echo, StackError, no_echo

VERSION = "3.0.9"
ARTIFACT = f"io.apicurio:apicurio-registry-app:{VERSION}:tar.gz:all"
RUNNER_JAR = f"apicurio-registry-app-{VERSION}-runner.jar"

HOST = "127.0.0.1"
PORT = 18081
#: the Confluent-compatible API, the base URL clients (Reef, confluent-kafka, kcat) use
LOCAL_URL = f"http://{HOST}:{PORT}/apis/ccompat/v7"


@dataclass(frozen=True)
class RegistryInstall:
    """The unpacked Apicurio distribution in the stack home."""

    root: Path

    @property
    def runner(self) -> Path:
        return self.root / RUNNER_JAR

    @property
    def complete_marker(self) -> Path:
        return self.root / ".reef-complete"

    def is_complete(self) -> bool:
        return self.complete_marker.is_file() and self.runner.is_file()


def install_for(settings: StackSettings) -> RegistryInstall:
    return RegistryInstall(settings.home / f"apicurio-registry-{VERSION}")


def run_root(settings: StackSettings) -> Path:
    return settings.run_dir / "schema-registry"


def service_for(settings: StackSettings) -> process.Service:
    root = run_root(settings)
    data = root / "data"
    return process.Service(
        name="schema-registry",
        argv=(
            "java",
            "-Xmx320m",
            # a local registry: a quick start and a small footprint beat peak throughput
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dquarkus.http.host={HOST}",
            f"-Dquarkus.http.port={PORT}",
            f"-Dapicurio.datasource.url=jdbc:h2:file:{data}/registry",
            # subjects and versions may be deleted (DELETE /subjects/...), as on Confluent's
            "-Dapicurio.rest.deletion.artifact.enabled=true",
            "-Dapicurio.rest.deletion.artifact-version.enabled=true",
            f"-Dreef_dev.stack.service={root}",
            "-jar",
            str(install_for(settings).runner),
        ),
        workdir=root,
        log_file=root / "registry.log",
        pid_file=root / "registry.pid",
        marker=str(root),
    )


# ---------------------------------------------------------------------------
# Installation


def ensure_installed(settings: StackSettings, echo: Echo = no_echo) -> RegistryInstall:
    """Fetch and unpack the Apicurio distribution unless the stack home has it."""
    install = install_for(settings)
    if install.is_complete():
        return install
    for tool in ("mvn", "java"):
        if shutil.which(tool) is None:
            raise StackError(
                f"`{tool}` is not on PATH; the schema registry needs Java 17+ and Maven"
            )
    staging = install.root.with_name(install.root.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    log = settings.home / f"apicurio-registry-{VERSION}.mvn.log"
    echo(f"Fetching Apicurio Registry {VERSION} from Maven Central (log: {log})")
    started = time.monotonic()
    process.run_logged(
        [
            "mvn",
            "-B",
            "-q",
            "dependency:copy",
            f"-Dartifact={ARTIFACT}",
            f"-DoutputDirectory={staging}",
        ],
        label="mvn",
        log_file=log,
        cwd=settings.home,
        echo=echo,
    )
    archives = list(staging.glob("*.tar.gz"))
    if len(archives) != 1:
        raise StackError(f"Maven finished but {staging} holds {len(archives)} archives, want 1")
    with tarfile.open(archives[0]) as archive:
        archive.extractall(staging, filter="data")
    archives[0].unlink()
    if not (staging / RUNNER_JAR).is_file():
        raise StackError(f"the Apicurio archive has no {RUNNER_JAR}")
    shutil.rmtree(install.root, ignore_errors=True)
    staging.rename(install.root)
    install.complete_marker.write_text(f"{ARTIFACT}\n")
    took = process.format_elapsed(time.monotonic() - started)
    echo(f"Apicurio Registry {VERSION} installed in {took}: {install.root}")
    return install


# ---------------------------------------------------------------------------
# Readiness and lifecycle


def probe(url: str) -> None:
    """Raise unless the Confluent-compatible API at ``url`` lists its subjects."""
    response = httpx.get(f"{url}/subjects", timeout=5.0)
    response.raise_for_status()
    if not isinstance(response.json(), list):
        raise StackError(f"{url}/subjects did not answer a list: {response.text[:200]}")


def wait_ready(
    url: str,
    *,
    timeout: float = 120.0,
    services: tuple[process.Service, ...] = (),
    echo: Echo = no_echo,
) -> float:
    def ready() -> bool:
        if url == LOCAL_URL and not process.port_open(HOST, PORT):
            raise StackError(f"nothing listening at {HOST}:{PORT} yet")
        probe(url)
        return True

    return process.wait_until(
        f"the schema registry at {url}", ready, timeout=timeout, services=services, echo=echo
    )


def launch(settings: StackSettings, *, echo: Echo = no_echo) -> bool:
    """Install (first time) and spawn the registry unless it runs, without waiting.

    ``scripts/stack up`` launches it first and waits for it last, so the JVM boots
    while Kafka and SeaweedFS start. Returns whether a process was spawned.
    """
    with process.file_lock(settings.lock_file.with_name("schema-registry.lock")):
        ensure_installed(settings, echo)
        service = service_for(settings)
        if service.is_running():
            return False
        process.require_free_ports(service, HOST, (PORT,))
        (run_root(settings) / "data").mkdir(parents=True, exist_ok=True)
        pid = process.spawn(service)
        echo(f"Started the schema registry (Apicurio {VERSION}, pid {pid}) on {LOCAL_URL}")
        return True


def up(settings: StackSettings, *, echo: Echo = no_echo, timeout: float = 120.0) -> str:
    """Start the registry unless it runs and wait until its API answers; return its URL."""
    launch(settings, echo=echo)
    waited = wait_ready(LOCAL_URL, timeout=timeout, services=(service_for(settings),), echo=echo)
    echo(f"Schema registry ready at {LOCAL_URL} (waited {process.format_elapsed(waited)})")
    return LOCAL_URL


def down(settings: StackSettings, *, echo: Echo = no_echo) -> None:
    if process.stop(service_for(settings), timeout=20.0):
        echo("Stopped the schema registry")


def wipe(settings: StackSettings) -> None:
    """Remove the stopped registry's data (every subject and id) and logs."""
    if service_for(settings).is_running():
        raise StackError("the schema registry is running; stop it first")
    shutil.rmtree(run_root(settings), ignore_errors=True)
