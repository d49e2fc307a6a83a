"""Where the local stack lives, and the only place that reads the environment.

Everything the stack installs or writes (Kafka jars, the SeaweedFS and OpenTelemetry
Collector binaries, the schema registry's distribution, data,
logs, pid files) goes under ``$REEF_STACK_HOME`` (default
``~/.cache/reef-stack``), outside the repository.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_STACK_HOME = "REEF_STACK_HOME"
ENV_TEST_KAFKA_BOOTSTRAP = "REEF_TEST_KAFKA_BOOTSTRAP"
ENV_TEST_S3_ENDPOINT = "REEF_TEST_S3_ENDPOINT"
ENV_TEST_S3_ACCESS_KEY = "REEF_TEST_S3_ACCESS_KEY"
ENV_TEST_S3_SECRET_KEY = "REEF_TEST_S3_SECRET_KEY"  # noqa: S105 - a variable name
ENV_TEST_S3_BUCKET = "REEF_TEST_S3_BUCKET"
ENV_TEST_SCHEMA_REGISTRY_URL = "REEF_TEST_SCHEMA_REGISTRY_URL"
ENV_TEST_OTLP_ENDPOINT = "REEF_TEST_OTLP_ENDPOINT"


@dataclass(frozen=True)
class StackSettings:
    """Environment-derived settings for the local stack and the test fixtures."""

    home: Path
    external_kafka_bootstrap: str | None = None
    external_s3_endpoint: str | None = None
    external_s3_access_key: str | None = None
    external_s3_secret_key: str | None = None
    external_s3_bucket: str | None = None
    external_schema_registry_url: str | None = None

    @property
    def run_dir(self) -> Path:
        """Pid files, data and logs of running services."""
        return self.home / "run"

    @property
    def lock_file(self) -> Path:
        return self.home / "run" / "stack.lock"


def load_settings(environ: Mapping[str, str] | None = None) -> StackSettings:
    """Read the stack settings from ``environ`` (default: the process environment)."""
    env = os.environ if environ is None else environ

    def opt(name: str) -> str | None:
        value = env.get(name, "").strip()
        return value or None

    home_value = opt(ENV_STACK_HOME)
    if home_value is not None:
        home = Path(home_value).expanduser()
    else:
        user_home = opt("HOME")
        base = Path(user_home) if user_home else Path.home()
        home = base / ".cache" / "reef-stack"
    return StackSettings(
        home=home.absolute(),
        external_kafka_bootstrap=opt(ENV_TEST_KAFKA_BOOTSTRAP),
        external_s3_endpoint=opt(ENV_TEST_S3_ENDPOINT),
        external_s3_access_key=opt(ENV_TEST_S3_ACCESS_KEY),
        external_s3_secret_key=opt(ENV_TEST_S3_SECRET_KEY),
        external_s3_bucket=opt(ENV_TEST_S3_BUCKET),
        external_schema_registry_url=opt(ENV_TEST_SCHEMA_REGISTRY_URL),
    )
