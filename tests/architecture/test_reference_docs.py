"""The generated reference pages (docs/reference/) are what the code renders now.

A setting, route, command, schema field or metric added without regenerating fails here;
``python -m reef.cli.docs`` regenerates every page.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reef.cli.docs import REGENERATE, metric_definitions, render_reference, stale_pages
from reef.core.topics import TOPIC_EVENTS
from reef.settings import names as setting_names

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "reference"


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return render_reference()


def test_every_reference_page_is_current(rendered: dict[str, str]) -> None:
    stale = stale_pages(REFERENCE, rendered)
    assert not stale, f"docs/reference/ pages differ from the code: {stale}; run `{REGENERATE}`"


def test_the_settings_page_names_every_setting_and_its_env(rendered: dict[str, str]) -> None:
    for name in setting_names():
        assert f"| `{name}` | `REEF_{name.upper()}` |" in rendered["settings.md"], name


def test_the_events_page_has_every_schema_and_field(rendered: dict[str, str]) -> None:
    published = {event for events in TOPIC_EVENTS.values() for event in events}
    for path in sorted((REPO / "schemas").glob("*.avsc")):
        schema = json.loads(path.read_text())
        section = rendered["events.md"].split(f"## `{schema['name']}`\n", 1)[1].split("\n## ")[0]
        for field in schema["fields"]:
            assert f"| `{field['name']}` |" in section, (path.name, field["name"])
        if schema["name"] in published:
            assert "Topic: `none`" not in section, schema["name"]


def test_the_http_page_has_every_operation(rendered: dict[str, str]) -> None:
    document = json.loads((REPO / "tests/architecture/snapshots/openapi.json").read_text())
    for path, operations in document["paths"].items():
        for method in operations:
            assert f"## `{method.upper()} {path}`" in rendered["http.md"], (method, path)


def test_counters_are_named_as_exposed_and_comprehensions_expanded() -> None:
    source = """
requests = Counter("reef_requests", "HTTP requests.", ["route", "status"])
seconds = Histogram("reef_seconds", "Time.", buckets=B)
families = {
    name: GaugeMetricFamily(f"reef_arm_{name}", doc, labels=["arm"])
    for name, doc in (("errors", "Errors per arm."), ("served", "Served per arm."))
}
fates = CounterMetricFamily("reef_fates", "Fates.", labels=["status"])
"""
    assert metric_definitions(source) == [
        ("reef_arm_errors", "gauge", "`arm`", "Errors per arm."),
        ("reef_arm_served", "gauge", "`arm`", "Served per arm."),
        ("reef_fates_total", "counter", "`status`", "Fates."),
        ("reef_requests_total", "counter", "`route`, `status`", "HTTP requests."),
        ("reef_seconds", "histogram", "", "Time."),
    ]


def test_a_stale_or_missing_page_is_named(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("old\n")
    (tmp_path / "b.md").write_text("same\n")
    wanted = {"a.md": "new\n", "b.md": "same\n", "c.md": "new\n"}
    assert stale_pages(tmp_path, wanted) == ["a.md", "c.md"]
