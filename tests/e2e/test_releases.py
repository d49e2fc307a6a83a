"""A weight release rolled back on Kafka + S3, end to end against a real ``reef serve``
with a ``reef streams`` worker hosting the chain (its own topic prefix, S3 key prefix and
worker, all removed at the end): the new head's materialised files (a few MB of random
``model.safetensors`` + ``config.json``) equal the target's byte for byte.

The rest of the release API and the Git view, on the embedded default, is
tests/api/test_releases.py (the same app, in process).
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reef.artifacts import open_store
from reef.artifacts.content import ContentStore
from reef.log.kafka import delete_prefixed_topics
from reef.settings import Settings
from reef.testing.servers import ReefProcess, UpstreamProcess, run_reef, start_reef
from tests.support.deployment import Deployment
from tests.support.streams import start_streams
from tests.support.weight_rollback import check_weight_rollback

WEIGHT_BYTES = 3 * 1024 * 1024 + 17  # not a multiple of any chunk size


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def server_env(admin: str, reader: str, extra: dict[str, str]) -> dict[str, str]:
    return {
        "REEF_TOKEN": admin,
        "REEF_TOKENS": f"{reader}:read",
        "REEF_UPSTREAM_API_KEY": f"sk-upstream-{secrets.token_hex(8)}",
        **extra,
    }


@pytest.fixture(scope="module")
def kafka_s3(
    kafka_bootstrap: str,
    s3: Any,
    upstream: UpstreamProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    """Kafka log on its own topic prefix, ``reef streams`` hosting the chain, S3 artifacts."""
    tag = uuid.uuid4().hex[:10]
    prefix = f"t-releases-{tag}-"
    s3_prefix = f"e2e-releases-{tag}"
    work = tmp_path_factory.mktemp("releases-kafka")
    s3_env = {
        "REEF_ARTIFACTS": "s3",
        "REEF_S3_ENDPOINT": s3.endpoint,
        "REEF_S3_ACCESS_KEY": s3.access_key,
        "REEF_S3_SECRET_KEY": s3.secret_key,
        "REEF_S3_BUCKET": s3.bucket,
        "REEF_S3_REGION": s3.region,
        "REEF_S3_PREFIX": s3_prefix,
    }
    log_flags = ["--log", "kafka", "--kafka-bootstrap", kafka_bootstrap]
    log_flags += ["--kafka-topic-prefix", prefix]
    created = run_reef("topics", "create", *log_flags)
    assert created.returncode == 0, f"reef topics create:\n{created.stdout}\n{created.stderr}"
    worker = start_streams(kafka_bootstrap, prefix, work / "streams")
    admin, reader = f"adm-{secrets.token_hex(8)}", f"rd-{secrets.token_hex(8)}"
    process: ReefProcess | None = None
    try:
        process = start_reef(
            [*log_flags, "--upstream-url", upstream.v1_url],
            env=server_env(admin, reader, s3_env),
            state_dir=work / "state",
        )
        worker.wait_ready()
        settings = Settings.of(
            artifacts="s3",
            s3_endpoint=s3.endpoint,
            s3_access_key=s3.access_key,
            s3_secret_key=s3.secret_key,
            s3_bucket=s3.bucket,
            s3_region=s3.region,
            s3_prefix=s3_prefix,
        )
        from reef.log.kafka import KafkaLog

        yield Deployment(
            name="kafka-s3",
            process=process,
            admin_token=admin,
            read_token=reader,
            content=ContentStore(open_store(settings)),
            new_log=lambda: KafkaLog(
                kafka_bootstrap, topic_prefix=prefix, client_id="reef-e2e-trainer"
            ),
            decide_timeout=60.0,
        )
    finally:
        if process is not None:
            process.stop()
        worker.managed.stop(timeout=20)
        _run(delete_prefixed_topics(kafka_bootstrap, prefix))
        client = s3.client()
        for obj in client.list_objects(s3.bucket, prefix=s3_prefix + "/", recursive=True):
            client.remove_object(s3.bucket, obj.object_name)


# ---------------------------------------------------------------------------
# Rollback of a weight release


@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.slow
def test_rollback_of_a_weight_release_restores_its_bytes(
    kafka_s3: Deployment, tmp_path: Path
) -> None:
    check_weight_rollback(kafka_s3, tmp_path)
    kafka_s3.alive()
