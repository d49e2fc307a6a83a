"""``reef topics create`` registers Reef's schemas in the stack's real schema registry
(Apicurio, Confluent API), and the registry itself refuses an incompatible change."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from reef.cli.log import topics
from reef.codec import schema_dir
from reef.core.errors import IncompatibleSchemaError
from reef.core.topics import TOPIC_EVENTS
from reef.log.kafka import delete_prefixed_topics
from reef.log.schema_registry import SchemaRegistry, register_schemas, registration_plan

pytestmark = pytest.mark.kafka

INFERENCE_SUBJECT = "reef.inference-reef.events.InferenceRecorded"


def _topics_create(bootstrap: str, registry_url: str, prefix: str) -> Result:
    args = ["create", "--log", "kafka", "--kafka-bootstrap", bootstrap]
    args += ["--kafka-topic-prefix", prefix, "--schema-registry-url", registry_url]
    return CliRunner().invoke(topics, args, catch_exceptions=False)


@pytest.fixture
def prefix(kafka_bootstrap: str) -> Iterator[str]:
    """A deployment namespace of its own: topics on the broker, subjects in the registry."""
    name = f"sr-{uuid.uuid4().hex[:8]}."
    yield name
    asyncio.run(asyncio.wait_for(delete_prefixed_topics(kafka_bootstrap, name), 60))


@pytest.fixture
def registry(schema_registry_url: str) -> Iterator[SchemaRegistry]:
    with SchemaRegistry(schema_registry_url) as client:
        yield client


def _expected_versions() -> dict[str, int]:
    """Unprefixed subject -> how many versions it gets: one per history file + the current."""
    root = schema_dir()
    expected = {}
    for topic, event_types in TOPIC_EVENTS.items():
        for event_type in event_types:
            history = list((root / "history").glob(f"{event_type}.*.avsc"))
            expected[f"{topic}-reef.events.{event_type}"] = len(history) + 1
    return expected


def test_every_schema_is_registered_under_its_topic_and_record_with_backward_and_rerun_adds_none(
    kafka_bootstrap: str, schema_registry_url: str, prefix: str, registry: SchemaRegistry
) -> None:
    done = _topics_create(kafka_bootstrap, schema_registry_url, prefix)
    assert done.exit_code == 0, done.output
    expected = _expected_versions()
    mine = {s.removeprefix(prefix) for s in registry.subjects() if s.startswith(prefix)}
    assert mine == set(expected)
    for subject, count in expected.items():
        assert registry.compatibility(prefix + subject) == "BACKWARD"
        assert registry.versions(prefix + subject) == list(range(1, count + 1)), subject
    # the latest version of a subject is the current .avsc, the first the oldest history file
    current = json.loads((schema_dir() / "InferenceRecorded.avsc").read_text())
    oldest = json.loads((schema_dir() / "history" / "InferenceRecorded.1.avsc").read_text())
    plan = registration_plan(topic_prefix=prefix)[prefix + INFERENCE_SUBJECT]
    assert json.loads(plan[0].schema) == oldest and json.loads(plan[-1].schema) == current
    assert registry.find(prefix + INFERENCE_SUBJECT, plan[-1].schema) == len(plan)
    assert f"{sum(expected.values())} new version(s) under {len(expected)} subjects" in done.output

    again = _topics_create(kafka_bootstrap, schema_registry_url, prefix)
    assert again.exit_code == 0, again.output
    assert f"0 new version(s) under {len(expected)} subjects" in again.output
    for subject, count in expected.items():
        assert registry.versions(prefix + subject) == list(range(1, count + 1))


def _with_required_field(tmp_path: Path) -> Path:
    """A copy of schemas/ whose InferenceRecorded gained a required field (no default)."""
    root = tmp_path / "schemas"
    shutil.copytree(schema_dir(), root)
    path = root / "InferenceRecorded.avsc"
    schema = json.loads(path.read_text())
    schema["fields"].append({"name": "tenant", "type": "string"})
    path.write_text(json.dumps(schema, indent=2))
    return root


def test_the_registry_refuses_a_new_required_field_without_default(
    tmp_path: Path, prefix: str, registry: SchemaRegistry
) -> None:
    register_schemas(registry, registration_plan(topic_prefix=prefix))
    subject = prefix + INFERENCE_SUBJECT
    before = registry.versions(subject)

    changed = registration_plan(_with_required_field(tmp_path), topic_prefix=prefix)
    with pytest.raises(IncompatibleSchemaError) as refused:
        register_schemas(registry, changed)

    assert refused.value.status == 409  # the registry's own answer: no check on Reef's side
    assert refused.value.subject == subject
    assert "InferenceRecorded.avsc" in str(refused.value)
    assert "BACKWARD" in str(refused.value)
    assert registry.versions(subject) == before


def test_topics_create_fails_clearly_when_the_registry_refuses(
    kafka_bootstrap: str, schema_registry_url: str, prefix: str, registry: SchemaRegistry
) -> None:
    # the subject already holds an InferenceRecorded that the repository's oldest one
    # cannot follow under BACKWARD: it adds required fields without defaults
    subject = prefix + INFERENCE_SUBJECT
    minimal = {
        "type": "record",
        "name": "InferenceRecorded",
        "namespace": "reef.events",
        "fields": [{"name": "event_id", "type": "string"}],
    }
    registry.register(subject, json.dumps(minimal))

    done = _topics_create(kafka_bootstrap, schema_registry_url, prefix)

    assert done.exit_code == 1
    assert f"refused InferenceRecorded.1.avsc under subject {subject}" in done.output
    assert "HTTP 409" in done.output
    assert "Traceback" not in done.output
    assert registry.versions(subject) == [1]
