"""Kafka Connect's standalone worker with a file sink and an Avro converter for the registry.

The worker is the stack's own Kafka install (connect-runtime ships in its jars). Its
plugins are fetched once from Maven Central with ``mvn dependency:copy-dependencies``
into the stack home: Kafka's ``connect-file`` (``FileStreamSinkConnector``) and
Apicurio's ``AvroConverter``. Confluent's converter is not on Maven Central, and
Apicurio's 3.0.9 converter jar is, but its parent POM answered HTTP 404 here (a partial
mirror, by the look of other versions), so Maven cannot resolve it; 2.6.13.Final
resolves, and reads the Confluent wire format (magic 0 + 4-byte id) when told
``as-confluent`` with ``use-id: contentId`` (Apicurio's Confluent API hands out content
ids), fetching schemas through the registry's v2 API (Apicurio 3 serves it).
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from reef_dev.stack import kafka
from reef_dev.stack.paths import StackSettings
from reef_dev.stack.process import file_lock, run_logged, tail

CONVERTER_VERSION: Final = "2.6.13.Final"
CONVERTER_CLASS: Final = "io.apicurio.registry.utils.converter.AvroConverter"
_POM: Final = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>reef.tests</groupId>
  <artifactId>connect-plugins</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>connect-file</artifactId>
      <version>{kafka.KAFKA_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>io.apicurio</groupId>
      <artifactId>apicurio-registry-utils-converter</artifactId>
      <version>{CONVERTER_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"""
#: jars the worker itself provides: left out of the plugin folders (plugin isolation
#: would load a second copy of the Connect API, and converters must share the worker's)
_PROVIDED: Final = (
    "kafka-clients",
    "connect-api",
    "connect-json",
    "slf4j",
    "lz4",
    "snappy",
    "zstd",
)


def ensure_plugins(settings: StackSettings) -> Path:
    """The worker's ``plugin.path``, fetched with Maven the first time only."""
    root = settings.home / f"kafka-connect-plugins-{CONVERTER_VERSION}"
    plugins, marker = root / "plugins", root / "complete"
    digest = hashlib.sha256(_POM.encode()).hexdigest()
    with file_lock(root.parent / "kafka-connect-plugins.lock"):
        if marker.exists() and marker.read_text().strip() == digest:
            return plugins
        root.mkdir(parents=True, exist_ok=True)
        (root / "pom.xml").write_text(_POM)
        jars = root / "jars"
        shutil.rmtree(jars, ignore_errors=True)
        argv = ["mvn", "-B", "-f", str(root / "pom.xml"), "dependency:copy-dependencies"]
        run_logged(
            [*argv, f"-DoutputDirectory={jars}", "-DincludeScope=runtime"],
            label="mvn",
            log_file=root / "mvn.log",
            cwd=root,
        )
        shutil.rmtree(plugins, ignore_errors=True)
        for jar in jars.glob("*.jar"):
            if jar.name.startswith(_PROVIDED):
                continue
            folder = plugins / ("file" if jar.name.startswith("connect-file") else "apicurio")
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy2(jar, folder / jar.name)
        marker.write_text(digest + "\n")
    return plugins


def worker_properties(bootstrap: str, registry_url: str, plugins: Path, work: Path) -> str:
    """A standalone worker: string keys, Avro values in the Confluent wire format."""
    v2 = registry_url.replace("/apis/ccompat/v7", "/apis/registry/v2")
    return "\n".join(
        [
            f"bootstrap.servers={bootstrap}",
            "key.converter=org.apache.kafka.connect.storage.StringConverter",
            f"value.converter={CONVERTER_CLASS}",
            f"value.converter.apicurio.registry.url={v2}",
            "value.converter.apicurio.registry.as-confluent=true",
            "value.converter.apicurio.registry.use-id=contentId",
            "value.converter.apicurio.registry.headers.enabled=false",
            f"offset.storage.file.filename={work / 'offsets'}",
            "offset.flush.interval.ms=500",
            f"plugin.path={plugins}",
            "listeners=http://127.0.0.1:0",
            "consumer.auto.offset.reset=earliest",
            "",
        ]
    )


def file_sink_properties(name: str, topics: Sequence[str], out: Path) -> str:
    """A file sink; ``name`` is also its consumer group's (``connect-<name>``)."""
    return "\n".join(
        [
            f"name={name}",
            "connector.class=org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max=1",
            f"topics={','.join(topics)}",
            f"file={out}",
            "",
        ]
    )


@contextlib.contextmanager
def standalone_worker(
    settings: StackSettings, worker: str, connector: str, work: Path
) -> Iterator[Path]:
    """``ConnectStandalone`` running the connector; yields its log file."""
    install = kafka.ensure_installed(settings)
    work.mkdir(parents=True, exist_ok=True)
    (work / "worker.properties").write_text(worker)
    (work / "connector.properties").write_text(connector)
    log = work / "connect.log"
    argv = [
        "java",
        "-Xmx512m",
        f"-Dlog4j2.configurationFile={install.log4j_config}",
        "-cp",
        f"{install.libs}/*",
        "org.apache.kafka.connect.cli.ConnectStandalone",
        str(work / "worker.properties"),
        str(work / "connector.properties"),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=work)
    try:
        yield log
    finally:
        process.terminate()  # the sink's output is read already: a short grace is enough
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_lines(path: Path, count: int, log: Path, timeout: float = 90.0) -> list[str]:
    """The sink file's lines once it has ``count`` of them (fails with the worker's log)."""
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return lines
        time.sleep(0.5)
    raise AssertionError(f"{len(lines)} of {count} lines in {path}; worker log:\n{tail(log)}")
