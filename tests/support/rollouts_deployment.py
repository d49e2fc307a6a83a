"""The deployment the rollout e2e modules share: ``reef serve`` with ``REEF_ROLLOUTS``
in front of the scripted upstream, an admin and a read token; on Kafka a ``reef streams``
worker hosts the processors (the controller with the join and the chain), on topics of
its own prefix. Each test makes its own scenarios, so one deployment per log serves
tests/e2e/test_rollouts.py and test_shadow_rollouts.py alike."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

from reef.artifacts import LocalArtifactStore
from reef.artifacts.content import ContentStore
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import KafkaLog, delete_prefixed_topics
from reef.testing.servers import ReefProcess, UpstreamProcess, run_reef, start_reef
from tests.support.deployment import Deployment
from tests.support.streams import start_streams

ROLLOUTS_ENV = {"REEF_ROLLOUTS": "true"}


@contextlib.contextmanager
def rollouts_deployment(
    kind: str, upstream: UpstreamProcess, work: Path, kafka_bootstrap: str | None = None
) -> Iterator[Deployment]:
    state = work / "state"
    admin, reader = f"adm-{secrets.token_hex(8)}", f"rd-{secrets.token_hex(8)}"
    env = {
        **ROLLOUTS_ENV,
        "REEF_TOKEN": admin,
        "REEF_TOKENS": f"{reader}:read",
        "REEF_UPSTREAM_API_KEY": f"sk-up-{secrets.token_hex(4)}",
    }
    content = ContentStore(LocalArtifactStore.in_state_dir(state))
    if kind == "embedded":
        alone = start_reef(["--upstream-url", upstream.v1_url], env=env, state_dir=state)
        try:
            yield Deployment(
                "embedded",
                alone,
                admin,
                reader,
                content,
                lambda: EmbeddedLog(state / "log.sqlite3"),
                log_flags=["--state-dir", str(state)],
            )
        finally:
            alone.stop()
        return
    assert kafka_bootstrap is not None
    bootstrap = kafka_bootstrap
    prefix = f"t-rollouts-{uuid.uuid4().hex[:10]}-"
    kafka = ["--log", "kafka", "--kafka-bootstrap", bootstrap, "--kafka-topic-prefix", prefix]
    created = run_reef("topics", "create", *kafka)
    assert created.returncode == 0, f"reef topics create:\n{created.stdout}\n{created.stderr}"
    worker = start_streams(bootstrap, prefix, work / "streams", ROLLOUTS_ENV)
    process: ReefProcess | None = None
    try:
        process = start_reef([*kafka, "--upstream-url", upstream.v1_url], env=env, state_dir=state)
        worker.wait_ready()
        yield Deployment(
            "kafka",
            process,
            admin,
            reader,
            content,
            lambda: KafkaLog(bootstrap, topic_prefix=prefix, client_id="reef-e2e-rollouts"),
            log_flags=kafka,
            decide_timeout=60.0,
        )
    finally:
        if process is not None:
            process.stop()
        worker.managed.stop(timeout=20)
        asyncio.run(delete_prefixed_topics(bootstrap, prefix))
