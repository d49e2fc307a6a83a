"""The local stack's schema registry (Apicurio): installed once, restarted with its data."""

from __future__ import annotations

import json
import uuid

import pytest

from reef.log.schema_registry import SchemaRegistry
from reef_dev.stack import registry
from reef_dev.stack.paths import StackSettings


def _local(url: str) -> None:
    if url != registry.LOCAL_URL:
        pytest.fail(f"REEF_TEST_SCHEMA_REGISTRY_URL names another registry ({url})")


def test_a_second_up_installs_nothing(
    schema_registry_url: str, reef_stack_settings: StackSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    _local(schema_registry_url)
    monkeypatch.setenv("PATH", "/nonexistent")  # no mvn, no java: only the cached install
    install = registry.ensure_installed(reef_stack_settings)
    assert install.is_complete()
    assert registry.up(reef_stack_settings) == schema_registry_url


def test_a_restarted_registry_keeps_its_subjects_and_ids(
    schema_registry_url: str, reef_stack_settings: StackSettings
) -> None:
    _local(schema_registry_url)
    subject = f"stack-{uuid.uuid4().hex[:8]}-reef.events.Probe"
    schema = {"type": "record", "name": "Probe", "fields": [{"name": "a", "type": "int"}]}
    with SchemaRegistry(schema_registry_url) as client:
        schema_id = client.register(subject, json.dumps(schema))

    try:
        registry.down(reef_stack_settings)
        assert not registry.service_for(reef_stack_settings).is_running()
    finally:
        registry.up(reef_stack_settings)  # other tests share it

    with SchemaRegistry(schema_registry_url) as client:
        assert client.versions(subject) == [1]
        assert client.register(subject, json.dumps(schema)) == schema_id
