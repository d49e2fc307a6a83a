"""The codec of a deployment: the wire format it writes, and what its readers resolve.

``wire_format`` (a setting, ``--wire-format``) chooses what every value a process writes
looks like; every process reads both formats (see :mod:`reef.codec`):

* ``single-object`` (default): ``C3 01`` + schema fingerprint + Avro body. No registry
  is needed to write or read it; the schemas ship with Reef.
* ``confluent``: ``00`` + the registry's 4-byte schema id + the same Avro body, what the
  Kafka ecosystem's tools read (Connect converters, confluent-kafka's
  ``AvroDeserializer``, ksqlDB, Flink). The ids of the current schemas are looked up
  once, at start-up, under the ``TopicRecordNameStrategy`` subjects
  ``reef topics create --schema-registry-url`` registers them in; a subject without the
  current schema stops the process with a :class:`ConfigError` naming that command.
  Nothing is asked of the registry per record.

With ``schema_registry_url`` set, any other id a record carries (one written under a
superseded schema, or by a newer Reef) is asked of the registry the first time it is
read, then cached for the life of the process. An id the registry does not know makes
the record undecodable (:class:`UnknownSchemaError`); a registry that cannot be reached
raises :class:`SchemaRegistryError`, so the process stops rather than skip the record.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from reef.codec import EventCodec
from reef.core.errors import ConfigError, SchemaRegistryError
from reef.log.schema_registry import SchemaRegistry, registration_plan
from reef.settings import Settings

WireFormat = Literal["single-object", "confluent"]
WIRE_FORMATS: Final[tuple[WireFormat, ...]] = ("single-object", "confluent")


def open_codec(settings: Settings) -> EventCodec:
    """The codec every store and host of this process encodes and decodes with."""
    url = settings.wire.schema_registry_url
    if url is None:
        if settings.wire.format == "confluent":
            raise ConfigError(
                "wire_format confluent needs a schema registry: set schema_registry_url "
                "(--schema-registry-url, REEF_SCHEMA_REGISTRY_URL)"
            )
        return EventCodec()
    lookup = RegistrySchemas(url)
    if settings.wire.format == "single-object":
        return EventCodec(schema_by_id=lookup)
    ids = current_schema_ids(url, settings.kafka.topic_prefix)
    return EventCodec(schema_ids=ids, schema_by_id=lookup)


def current_schema_ids(url: str, topic_prefix: str) -> dict[str, int]:
    """Event type -> the registry's id of its current schema, under its topic's subject."""
    ids: dict[str, int] = {}
    try:
        with SchemaRegistry(url) as registry:
            for subject, versions in registration_plan(topic_prefix=topic_prefix).items():
                current = versions[-1]
                found = registry.find_id(subject, current.schema)
                if found is None:
                    raise ConfigError(
                        f"wire_format confluent: the schema registry at {url} has no "
                        f"{current.source.name} under subject {subject}; register the "
                        f"schemas first: reef topics create --schema-registry-url {url}"
                        + (f" --kafka-topic-prefix {topic_prefix}" if topic_prefix else "")
                    )
                ids[current.source.stem] = found
    except SchemaRegistryError as exc:
        raise ConfigError(f"wire_format confluent: {exc}") from exc
    return ids


class RegistrySchemas:
    """Schema id -> the registry's schema, one short-lived request per id asked.

    The codec caches what it gets, so each id is asked at most once per process; no
    connection is held between asks (there is nothing to close).
    """

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, schema_id: int) -> dict[str, Any] | None:
        with SchemaRegistry(self.url) as registry:
            return registry.schema(schema_id)
