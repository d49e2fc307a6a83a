"""The schema registry client without a registry: the plan's order and subjects, and the
translation of the registry's answers into Reef's errors (httpx.MockTransport)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from reef.core.errors import IncompatibleSchemaError, SchemaRegistryError
from reef.log.schema_registry import (
    SchemaRegistry,
    register_schemas,
    registration_plan,
    subject_name,
)


def _schema(name: str, *fields: str) -> dict[str, object]:
    return {
        "type": "record",
        "name": name,
        "namespace": "reef.events",
        "fields": [{"name": f, "type": "string", "default": "{}"} for f in fields],
    }


def _write(path: Path, schema: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema))


def test_the_plan_names_subjects_by_topic_and_record_and_orders_history_by_number(
    tmp_path: Path,
) -> None:
    _write(tmp_path / "InferenceRecorded.avsc", _schema("InferenceRecorded", "a", "b", "c"))
    _write(
        tmp_path / "history" / "InferenceRecorded.10.avsc", _schema("InferenceRecorded", "a", "b")
    )
    _write(tmp_path / "history" / "InferenceRecorded.2.avsc", _schema("InferenceRecorded", "a"))
    _write(tmp_path / "ScenarioCreated.avsc", _schema("ScenarioCreated"))

    plan = registration_plan(tmp_path, topic_prefix="p.")

    subject = subject_name("p.reef.inference", "reef.events.InferenceRecorded")
    assert list(plan) == [subject, "p.reef.scenarios-reef.events.ScenarioCreated"]
    sources = [v.source.name for v in plan[subject]]
    assert sources == [
        "InferenceRecorded.2.avsc",
        "InferenceRecorded.10.avsc",
        "InferenceRecorded.avsc",
    ]
    # the same schema once parsed, but no bare "{}" value for Apicurio's detector to mangle
    text = plan[subject][-1].schema
    assert ':"{}"' not in text
    assert json.loads(text) == _schema("InferenceRecorded", "a", "b", "c")


def _registry(handler: httpx.MockTransport) -> SchemaRegistry:
    return SchemaRegistry("http://registry.test/apis/ccompat/v7", transport=handler)


def test_a_409_is_an_incompatible_schema_error_naming_the_file_and_subject(tmp_path: Path) -> None:
    _write(tmp_path / "ScenarioCreated.avsc", _schema("ScenarioCreated", "a"))

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            return httpx.Response(200, json={"compatibility": "BACKWARD"})
        if request.url.path.endswith("/versions"):
            return httpx.Response(409, json={"error_code": 409, "message": "Incompatible"})
        return httpx.Response(404, json={"error_code": 40401, "message": "no subject"})

    with (
        _registry(httpx.MockTransport(answer)) as registry,
        pytest.raises(IncompatibleSchemaError) as refused,
    ):
        register_schemas(registry, registration_plan(tmp_path))
    assert refused.value.status == 409
    assert refused.value.subject == "reef.scenarios-reef.events.ScenarioCreated"
    assert "ScenarioCreated.avsc" in str(refused.value)


def test_other_answers_and_an_unreachable_registry_are_schema_registry_errors() -> None:
    def unprocessable(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"error_code": 42201, "message": "bad schema"})

    with _registry(httpx.MockTransport(unprocessable)) as registry:
        with pytest.raises(SchemaRegistryError, match="HTTP 422: bad schema") as failed:
            registry.register("s", "{}")
        assert failed.value.status == 422
        assert not isinstance(failed.value, IncompatibleSchemaError)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with _registry(httpx.MockTransport(refuse)) as registry:
        with pytest.raises(SchemaRegistryError, match="cannot reach") as failed:
            registry.subjects()
        assert failed.value.status is None


def test_missing_subjects_read_as_empty_not_as_errors() -> None:
    def missing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error_code": 40401, "message": "no subject"})

    with _registry(httpx.MockTransport(missing)) as registry:
        assert registry.versions("s") == []
        assert registry.compatibility("s") is None
        assert registry.find("s", "{}") is None
