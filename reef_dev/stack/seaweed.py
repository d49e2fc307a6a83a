"""An S3-compatible store for local development and tests: SeaweedFS ``weed mini``.

The ``weed`` binary is built once from the SeaweedFS Go module (pinned below)
into ``<stack home>/seaweedfs/weed``. ``go install module/weed@version`` does
not work for this module (its go.mod has replace directives), so the module is
downloaded with ``go mod download -json`` and built inside its module-cache
folder with ``go build ./weed``.

``weed mini`` runs master, volume server, filer and S3 gateway in one process.
S3 listens on 127.0.0.1:18333 with a fixed local access key / secret key, and
the bucket ``reef-test`` is created on start. Clients use path-style URLs.
"""

from __future__ import annotations

import io
import json
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reef_dev.stack import process
from reef_dev.stack.paths import StackSettings
from reef_dev.stack.process import Echo, StackError, no_echo

MODULE = "github.com/seaweedfs/seaweedfs"
MODULE_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"

HOST = "127.0.0.1"
S3_PORT = 18333
MASTER_PORT = 19333
VOLUME_PORT = 19340
FILER_PORT = 18888
VOLUME_SIZE_LIMIT_MB = 64

# Fixed credentials of the local, loopback-only test store; not a secret.
ACCESS_KEY = "reef-test-access"
SECRET_KEY = "reef-test-secret-key"  # noqa: S105
BUCKET = "reef-test"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Endpoint:
    """How to reach an S3-compatible store."""

    endpoint: str
    access_key: str
    secret_key: str
    bucket: str
    region: str = REGION

    @property
    def secure(self) -> bool:
        return self.endpoint.startswith("https://")

    @property
    def host(self) -> str:
        """``host:port``, as the ``minio`` client wants it."""
        return self.endpoint.split("://", 1)[-1].rstrip("/")

    def minio_client(self, *, probe: bool = False) -> Any:
        """A ``minio.Minio`` client for this endpoint (path-style addressing).

        ``probe=True`` gives short timeouts and no retries, for readiness checks.
        """
        from minio import Minio

        http_client = None
        if probe:
            import urllib3

            http_client = urllib3.PoolManager(
                timeout=urllib3.Timeout(connect=2.0, read=10.0), retries=False
            )
        return Minio(
            self.host,
            access_key=self.access_key,
            secret_key=self.secret_key,
            secure=self.secure,
            region=self.region,
            http_client=http_client,
        )


LOCAL_ENDPOINT = S3Endpoint(
    endpoint=f"http://{HOST}:{S3_PORT}",
    access_key=ACCESS_KEY,
    secret_key=SECRET_KEY,
    bucket=BUCKET,
)


def binary_path(settings: StackSettings) -> Path:
    return settings.home / "seaweedfs" / "weed"


def run_root(settings: StackSettings) -> Path:
    return settings.run_dir / "seaweedfs"


def service_for(settings: StackSettings) -> process.Service:
    root = run_root(settings)
    data = root / "data"
    return process.Service(
        name="seaweedfs",
        argv=(
            str(binary_path(settings)),
            "-logtostderr=true",
            "mini",
            f"-dir={data}",
            f"-ip={HOST}",
            f"-ip.bind={HOST}",
            f"-s3.port={S3_PORT}",
            f"-master.port={MASTER_PORT}",
            f"-volume.port={VOLUME_PORT}",
            f"-filer.port={FILER_PORT}",
            f"-master.volumeSizeLimitMB={VOLUME_SIZE_LIMIT_MB}",
            "-master.telemetry=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-webdav=false",
            "-admin.ui=false",
            f"-bucket={BUCKET}",
        ),
        workdir=root,
        log_file=root / "weed.log",
        pid_file=root / "weed.pid",
        marker=str(data),
        env={"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY},
    )


# ---------------------------------------------------------------------------
# Build


def _json_object(output: str) -> dict[str, Any]:
    start, end = output.find("{"), output.rfind("}")
    if start < 0 or end < start:
        raise StackError(f"no JSON in `go mod download` output:\n{output[-2000:]}")
    value: dict[str, Any] = json.loads(output[start : end + 1])
    return value


def ensure_built(settings: StackSettings, echo: Echo = no_echo) -> Path:
    """Build ``weed`` from the pinned SeaweedFS module unless it is already built."""
    binary = binary_path(settings)
    if binary.is_file():
        return binary
    if shutil.which("go") is None:
        raise StackError("`go` is not on PATH; building SeaweedFS needs Go 1.24+")
    build_dir = binary.parent
    build_dir.mkdir(parents=True, exist_ok=True)
    log = build_dir / "build.log"
    go_env = {"GOWORK": "off", "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"}
    started = time.monotonic()
    echo(f"Building SeaweedFS {MODULE_VERSION} into {binary} (log: {log})")
    echo(f"  [go] downloading module {MODULE}@{MODULE_VERSION}")
    out = process.run_logged(
        ["go", "mod", "download", "-json", f"{MODULE}@{MODULE_VERSION}"],
        label="go mod download",
        log_file=log,
        cwd=build_dir,
        env={"GOWORK": "off", "GOFLAGS": ""},
        echo=echo,
    )
    info = _json_object(out)
    if info.get("Error"):
        raise StackError(f"go mod download failed: {info['Error']}")
    source = Path(str(info["Dir"]))

    downloads = 0

    def download_progress(line: str) -> str | None:
        nonlocal downloads
        if line.startswith("go: downloading"):
            downloads += 1
            if downloads % 25 == 0:
                return f"downloaded {downloads} modules"
        return None

    echo("  [go] listing packages (downloads dependencies on a fresh machine)")
    listing = process.run_logged(
        ["go", "list", "-deps", "-f", "PKG {{.ImportPath}}", "./weed"],
        label="go list",
        log_file=log,
        cwd=source,
        env=go_env,
        echo=echo,
        on_line=download_progress,
    )
    total = sum(1 for line in listing.splitlines() if line.startswith("PKG "))
    echo(f"  [go] compiling up to {total} packages (cached ones are skipped)")
    compiled = 0
    last_note = time.monotonic()

    def build_progress(line: str) -> str | None:
        nonlocal compiled, last_note
        if line.startswith(("go: ", "#")) or not line or " " in line.strip():
            return None
        compiled += 1
        now = time.monotonic()
        if compiled % 100 == 0 or now - last_note >= 30:
            last_note = now
            elapsed = process.format_elapsed(now - started)
            return f"compiled {compiled}/{total} packages ({elapsed}), latest: {line.strip()}"
        return None

    partial = build_dir / "weed.partial"
    process.run_logged(
        ["go", "build", "-v", "-trimpath", "-ldflags=-s -w", "-o", str(partial), "./weed"],
        label="go build",
        log_file=log,
        cwd=source,
        env=go_env,
        echo=echo,
        on_line=build_progress,
    )
    partial.rename(binary)
    echo(f"SeaweedFS built in {process.format_elapsed(time.monotonic() - started)}: {binary}")
    return binary


# ---------------------------------------------------------------------------
# Readiness and lifecycle


def round_trip(endpoint: S3Endpoint) -> None:
    """Create the bucket if missing, then put, get and delete a small object."""
    client = endpoint.minio_client(probe=True)
    if not client.bucket_exists(endpoint.bucket):
        client.make_bucket(endpoint.bucket)
    key = f"reef-stack-probe/{uuid.uuid4().hex}"
    body = b"reef stack readiness probe"
    client.put_object(endpoint.bucket, key, io.BytesIO(body), len(body))
    response = client.get_object(endpoint.bucket, key)
    try:
        data = response.read()
    finally:
        response.close()
        response.release_conn()
    client.remove_object(endpoint.bucket, key)
    if data != body:
        raise StackError(f"S3 round trip returned {data!r}, want {body!r}")


def wait_ready(
    endpoint: S3Endpoint,
    *,
    timeout: float = 90.0,
    services: tuple[process.Service, ...] = (),
    echo: Echo = no_echo,
) -> float:
    def probe() -> bool:
        host, _, port = endpoint.host.rpartition(":")
        if port.isdigit() and not process.port_open(host, int(port)):
            raise StackError(f"nothing listening at {endpoint.host} yet")
        round_trip(endpoint)
        return True

    return process.wait_until(
        f"S3 at {endpoint.endpoint} (bucket {endpoint.bucket})",
        probe,
        timeout=timeout,
        services=services,
        interval=1.0,
        echo=echo,
    )


def up(settings: StackSettings, *, echo: Echo = no_echo, timeout: float = 90.0) -> S3Endpoint:
    """Build (first time) and start SeaweedFS unless it runs; wait for a bucket round trip."""
    with process.file_lock(settings.lock_file.with_name("seaweedfs.lock")):
        ensure_built(settings, echo)
        service = service_for(settings)
        started = time.monotonic()
        spawned = False
        if not service.is_running():
            process.require_free_ports(
                service, HOST, (S3_PORT, MASTER_PORT, VOLUME_PORT, FILER_PORT)
            )
            pid = process.spawn(service)
            spawned = True
            echo(f"Started SeaweedFS (pid {pid}); S3 on {LOCAL_ENDPOINT.endpoint}")
        wait_ready(LOCAL_ENDPOINT, timeout=timeout, services=(service,), echo=echo)
        if spawned:
            took = process.format_elapsed(time.monotonic() - started)
            echo(f"S3 ready at {LOCAL_ENDPOINT.endpoint} in {took}")
        else:
            echo(f"S3 already running at {LOCAL_ENDPOINT.endpoint}")
    return LOCAL_ENDPOINT


def down(settings: StackSettings, *, echo: Echo = no_echo) -> None:
    if process.stop(service_for(settings), timeout=20.0):
        echo("Stopped SeaweedFS")


def wipe(settings: StackSettings) -> None:
    """Remove the stopped store's data and logs."""
    if service_for(settings).is_running():
        raise StackError("SeaweedFS is running; stop it first")
    shutil.rmtree(run_root(settings), ignore_errors=True)
