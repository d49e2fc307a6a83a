"""A Confluent-format deployment's schemas in the test registry, and its codec."""

from __future__ import annotations

from reef.codec import EventCodec
from reef.log.schema_registry import SchemaRegistry, register_schemas, registration_plan
from reef.log.wire_format import open_codec
from reef.settings import Settings


def confluent_codec(registry_url: str, topic_prefix: str = "") -> EventCodec:
    """Register every schema under ``topic_prefix``'s subjects (what ``reef topics create
    --schema-registry-url`` does) and return the codec a confluent deployment writes with."""
    with SchemaRegistry(registry_url) as registry:
        register_schemas(registry, registration_plan(topic_prefix=topic_prefix))
    settings = Settings.of(
        schema_registry_url=registry_url, wire_format="confluent", kafka_topic_prefix=topic_prefix
    )
    return open_codec(settings)


def confluent_env(registry_url: str) -> dict[str, str]:
    """The settings of a confluent deployment's processes, as environment variables."""
    return {"REEF_WIRE_FORMAT": "confluent", "REEF_SCHEMA_REGISTRY_URL": registry_url}
