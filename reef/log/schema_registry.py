"""A Confluent Schema Registry client, and the registration of Reef's schemas in one.

Any registry that speaks the Confluent API works (Confluent's, Karapace, Apicurio's
``/apis/ccompat/v7``; the local stack runs Apicurio, see :mod:`reef_dev.stack.registry`).
Library errors are translated here, once: an unreachable registry or an error answer
is a :class:`SchemaRegistryError`, a version refused by the subject's compatibility
rule (HTTP 409) an :class:`IncompatibleSchemaError`.

Subjects follow ``TopicRecordNameStrategy``: ``<topic>-<record full name>``, the topic
as named on Kafka (with the deployment's prefix), so one topic carries several event
types and each type evolves on its own. :func:`register_schemas` does, per subject:

1. set the subject's compatibility (``PUT /config/<subject>``, BACKWARD by default),
   before any version, so the registry checks every version after the first;
2. register the superseded versions kept in ``schemas/history`` (oldest first), then
   the current ``schemas/<Type>.avsc``, each only when a lookup
   (``POST /subjects/<subject>``) does not find it already: a re-run registers
   nothing, and the registry's ids never change.

A failure stops at the version the registry refused; what was registered before it
stays registered (each version is a fact the registry keeps), and a re-run resumes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final
from urllib.parse import quote

import httpx

from reef.codec import schema_dir
from reef.core.errors import IncompatibleSchemaError, SchemaRegistryError
from reef.core.topics import TOPIC_EVENTS

CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"
#: Confluent's codes for "no such subject" (40401) and "not under this subject" (40403)
NOT_FOUND_CODES: Final = frozenset({40401, 40403})


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One schema file to register under a subject."""

    subject: str
    schema: str  #: the schema as compact JSON, the exact text sent and looked up
    source: Path


def subject_name(topic: str, record: str) -> str:
    """The ``TopicRecordNameStrategy`` subject of a record type on a topic."""
    return f"{topic}-{record}"


def full_name(schema: Mapping[str, Any]) -> str:
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _history_order(path: Path) -> tuple[str, int]:
    """``InferenceRecorded.3.avsc`` -> ("InferenceRecorded", 3): versions in number order."""
    event_type, _, number = path.stem.rpartition(".")
    return event_type, int(number) if number.isdigit() else 0


def registration_plan(
    schema_root: Path | None = None, *, topic_prefix: str = ""
) -> dict[str, list[SchemaVersion]]:
    """Subject -> the versions to register in order (history oldest first, then current)."""
    root = schema_root or schema_dir()
    topics = {event: topic for topic, events in TOPIC_EVENTS.items() for event in events}
    history: dict[str, list[Path]] = {}
    for path in sorted((root / "history").glob("*.avsc"), key=_history_order):
        history.setdefault(_history_order(path)[0], []).append(path)
    plan: dict[str, list[SchemaVersion]] = {}
    for current in sorted(root.glob("*.avsc")):
        event_type = current.stem
        if event_type not in topics:
            raise SchemaRegistryError(f"{current}: no topic carries event type {event_type!r}")
        for path in (*history.get(event_type, ()), current):
            raw = json.loads(path.read_text())
            subject = subject_name(topic_prefix + topics[event_type], full_name(raw))
            text = _without_bare_braces(json.dumps(raw, separators=(",", ":")))
            plan.setdefault(subject, []).append(SchemaVersion(subject, text, path))
    return plan


def _without_bare_braces(text: str) -> str:
    """Write a ``"{}"`` string value as ``"\\u007b}"``: the same JSON, the same schema.

    Apicurio's Avro detector (``AvroContentAccepter``, 3.0.x to 3.3.x) rewrites
    ``: "{}"`` to ``:{}`` before parsing, so a string field defaulting to "{}" (as
    ``ReleaseCommitted.metrics_json`` does) becomes a map default, the schema is not
    recognised as Avro, and the registry answers 422. An escaped brace is not rewritten.
    """
    return text.replace(':"{}"', ':"\\u007b}"')


class SchemaRegistry:
    """The calls Reef makes on a Confluent-compatible registry (synchronous httpx)."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url,
            timeout=timeout,
            transport=transport,
            headers={"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE},
        )

    def __enter__(self) -> SchemaRegistry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def subjects(self) -> list[str]:
        return [str(s) for s in self._call("GET", "/subjects").json()]

    def versions(self, subject: str) -> list[int]:
        """The subject's version numbers ([] when it does not exist)."""
        response = self._call("GET", f"/subjects/{_q(subject)}/versions", missing_ok=True)
        return [] if response is None else [int(v) for v in response.json()]

    def compatibility(self, subject: str) -> str | None:
        """The subject's own compatibility level (None when it has none set)."""
        response = self._call("GET", f"/config/{_q(subject)}", missing_ok=True)
        return None if response is None else str(response.json()["compatibilityLevel"])

    def set_compatibility(self, subject: str, level: str) -> None:
        self._call("PUT", f"/config/{_q(subject)}", {"compatibility": level})

    def find(self, subject: str, schema: str) -> int | None:
        """The version under which ``schema`` is registered in ``subject``, if it is."""
        response = self._call("POST", f"/subjects/{_q(subject)}", {"schema": schema}, True)
        return None if response is None else int(response.json()["version"])

    def find_id(self, subject: str, schema: str) -> int | None:
        """The schema id of ``schema`` when it is registered in ``subject``."""
        response = self._call("POST", f"/subjects/{_q(subject)}", {"schema": schema}, True)
        return None if response is None else int(response.json()["id"])

    def schema(self, schema_id: int) -> dict[str, Any] | None:
        """The schema the registry holds under ``schema_id`` (parsed), None if none."""
        response = self._call("GET", f"/schemas/ids/{schema_id}", missing_ok=True)
        return None if response is None else dict(json.loads(response.json()["schema"]))

    def register(self, subject: str, schema: str) -> int:
        """Register ``schema`` as the subject's next version; return its schema id."""
        path = f"/subjects/{_q(subject)}/versions"
        return int(self._call("POST", path, {"schema": schema}).json()["id"])

    def _call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        missing_ok: bool = False,
    ) -> Any:
        try:
            response = self._client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise SchemaRegistryError(
                f"cannot reach the schema registry at {self.url}: {exc}"
            ) from exc
        if response.is_success:
            return response
        message, code = _error_of(response)
        if missing_ok and response.status_code == 404 and code in NOT_FOUND_CODES:
            return None
        where = f"{method} {self.url}{path}"
        if response.status_code == 409:
            raise IncompatibleSchemaError(
                f"{where}: {message}", subject=_subject_of(path), status=409
            )
        raise SchemaRegistryError(
            f"{where} answered HTTP {response.status_code}: {message}",
            status=response.status_code,
        )


def _q(subject: str) -> str:
    return quote(subject, safe="")


def _subject_of(path: str) -> str:
    parts = path.split("/")
    return parts[2] if len(parts) > 2 else ""


def _error_of(response: httpx.Response) -> tuple[str, int | None]:
    """The registry's ``{"error_code", "message"}`` body, or the raw text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500], None
    if not isinstance(body, dict):
        return response.text[:500], None
    code = body.get("error_code")
    return str(body.get("message", response.text[:500])), int(code) if code is not None else None


@dataclass(frozen=True, slots=True)
class Registration:
    """What one :func:`register_schemas` run did."""

    subjects: tuple[str, ...]
    #: (subject, schema file) of each version registered by this run, in order
    registered: tuple[tuple[str, Path], ...]
    compatibility: str


def register_schemas(
    registry: SchemaRegistry,
    plan: Mapping[str, Sequence[SchemaVersion]],
    *,
    compatibility: str = "BACKWARD",
) -> Registration:
    """Set each subject's compatibility, then register its missing versions in order."""
    registered: list[tuple[str, Path]] = []
    for subject, versions in plan.items():
        registry.set_compatibility(subject, compatibility)
        for version in versions:
            if registry.find(subject, version.schema) is not None:
                continue
            try:
                registry.register(subject, version.schema)
            except IncompatibleSchemaError as exc:
                raise IncompatibleSchemaError(
                    f"the schema registry refused {version.source.name} under subject "
                    f"{subject}: it is not {compatibility}-compatible with the versions "
                    f"registered before it (HTTP {exc.status}; {exc})",
                    subject=subject,
                    status=exc.status or 409,
                ) from exc
            registered.append((subject, version.source))
    return Registration(tuple(plan), tuple(registered), compatibility)
