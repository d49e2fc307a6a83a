"""Reef's one error tree; library errors are translated into it once, in their adapter.

    ReefError
    ├── ConfigError                 bad configuration, found at start-up
    ├── CodecError                  encoding / decoding of events
    │   ├── EventValidationError    an event does not match its schema (names the field)
    │   ├── UnknownSchemaError      a payload's fingerprint is not in the catalogue
    │   ├── CorruptRecordError      a payload is not single-object Avro at all
    │   └── UndecodableRecordError  a record read by reef.history cannot be decoded or opened
    ├── LogError                    the event log
    │   ├── LogUnavailableError     cannot record right now (HTTP 503); nothing was written
    │   └── UnknownTopicError       the topic does not exist
    ├── SchemaRegistryError         a schema registry request failed (reef.log.schema_registry)
    │   └── IncompatibleSchemaError the registry refused a schema as incompatible (HTTP 409)
    ├── StackError                  the local development stack (Kafka, S3) failed
    │   └── ProcessStartError       a process of a test deployment did not start (reef.testing)
    ├── SealError                   a sealed body cannot be opened (reef.crypto.seal)
    ├── LoadRefusedError            a sidecar refuses a release it must not load (reef.sidecar)
    ├── TrainerError                a trainer cannot go on (trainers.errors)
    ├── CommitStalledError          a Kafka task's transaction commit stalled (streams)
    ├── ConsumerFailedError         a Kafka worker's consumer failed to poll (streams)
    ├── EvaluationFailedError       a candidate's or its head's evaluation failed (trainers)
    ├── JudgeError                  a judge request failed (reef.services.judge_client)
    ├── UpstreamBrokeError          the upstream's reply broke off while relayed (reef.api.upstream)
    ├── HttpClientError             the relay's HTTP client failed (reef.api.http_client), each
    │   │                           translated in reef.api.upstream
    │   ├── ConnectFailed           no connection: nothing was sent
    │   ├── TimedOut                no connection, or no byte, within its timeout
    │   └── ReplyBroken             the reply ended or was unparseable before it was whole
    ├── HarnessTreeError            a harness tree cannot be rendered (reef.harness)
    │   ├── UnknownAdapterError     no adapter by that name
    │   ├── AdapterRefusedError     the adapter does not render an entry's kind
    │   ├── UnsafeHarnessPathError  a path is absolute or escapes its root
    │   └── CredentialInTreeError   a config entry carries a credential
    └── RequestError                a client request is invalid (HTTP 4xx, see reef.api)

Subtrees drawn where they are defined: ArtifactError (reef.artifacts.errors), EngineError
(reef.engine.errors), RecipeConfigError and RecipeError (recipes.errors).

Every adapter raises these with ``raise ... from exc`` so the cause stays visible.
"""

from __future__ import annotations


class ReefError(Exception):
    """Base of every error Reef raises on purpose."""


class ConfigError(ReefError):
    """The configuration is invalid."""


class CodecError(ReefError):
    """An event could not be encoded or decoded."""


class EventValidationError(CodecError):
    """An event does not match its Avro schema; the message names the field."""

    def __init__(self, event_type: str, field: str, reason: str) -> None:
        super().__init__(f"{event_type}.{field}: {reason}")
        self.event_type = event_type
        self.field = field


class UnknownSchemaError(CodecError):
    """The payload's schema fingerprint is not in the catalogue."""


class CorruptRecordError(CodecError):
    """The payload is not a well-formed single-object-encoded Avro datum."""


class LogError(ReefError):
    """The event log failed."""


class LogUnavailableError(LogError):
    """The log cannot record right now; the write did not happen."""


class UnknownTopicError(LogError):
    """The topic does not exist in this log."""


class SchemaRegistryError(ReefError):
    """The schema registry could not be reached, or answered with an error."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        #: the registry's HTTP status, None when it was not reached
        self.status = status


class IncompatibleSchemaError(SchemaRegistryError):
    """The registry refused a schema version: it breaks the subject's compatibility rule."""

    def __init__(self, message: str, *, subject: str, status: int = 409) -> None:
        super().__init__(message, status=status)
        self.subject = subject


class StackError(ReefError):
    """The local development stack could not be installed, started or reached."""


class UpstreamBrokeError(ReefError):
    """The upstream's reply broke off after it had begun (reset, timeout, bad framing)."""


class RequestError(ReefError):
    """A client request is invalid; carries an HTTP status and a stable code."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        #: extra response headers (e.g. ``Retry-After`` on 429)
        self.headers = dict(headers or {})
