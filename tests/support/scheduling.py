"""Which tests may run beside which, when ``scripts/test`` runs the suite two at a time.

Each test gets the group :func:`group_of` names, as an ``xdist_group`` mark:

* ``shared-stack``: every test that touches the local stack's shared services — the
  Kafka broker and cluster (Reef's topics there are shared by every test, and
  some tests assert that nothing was written to them), the S3 server (some tests stop
  and kill it), the schema registry and the OTLP collector. These also get the
  ``shared_stack`` mark: ``scripts/test`` runs them in a pytest of their own, one after
  another in pytest's usual order, beside a second pytest running the rest.
* a package- or module-scoped deployment's name: tests sharing an expensive fixture stay
  on one worker, so the fixture is built once;
* otherwise the test's module.

The tests that need no stack run on two workers (``pytest -n 2 --dist loadgroup``, which
sends every test of one group to the same worker). Fault tests (``tests/faults``) run
alone, after the rest, since they time a recovery under a kill.
"""

from __future__ import annotations

from typing import Final

import pytest

#: the fixtures of tests/stack_plugin.py (and those built on them) that reach the stack
STACK_FIXTURES: Final[frozenset[str]] = frozenset(
    {
        "kafka_bootstrap",
        "kafka_cluster",
        "kafka_topics",
        "s3",
        "schema_registry_url",
        "otlp_receiver",
        "new_topic_name",
    }
)
#: markers of tests that need the stack (the Kafka parameter of a both-logs test has one)
STACK_MARKERS: Final[frozenset[str]] = frozenset({"kafka", "cluster", "s3"})
SHARED_STACK: Final = "shared-stack"


def group_of(item: pytest.Item) -> str:
    """The ``xdist_group`` of ``item`` (see the module's docstring)."""
    if any(item.get_closest_marker(name) is not None for name in STACK_MARKERS):
        return SHARED_STACK
    names = set(getattr(item, "fixturenames", ()))
    if names & STACK_FIXTURES:
        return SHARED_STACK
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "kafka" in callspec.params.values():
        return SHARED_STACK  # a log-kind parameter whose fixture asks for Kafka itself
    info = getattr(item, "_fixtureinfo", None)
    fixtures = {} if info is None else info.name2fixturedefs
    for name in sorted(names):
        defs = fixtures.get(name, ())
        if defs and defs[-1].scope == "package":
            return f"package:{name}"
    return "module:" + item.nodeid.split("::", 1)[0]


def assign_groups(items: list[pytest.Item]) -> None:
    """Mark every item with its group (it only matters when xdist schedules by group), and
    the shared-stack ones ``shared_stack`` too: ``scripts/test`` runs those in a pytest of
    their own, in pytest's usual order, beside a second pytest running the rest."""
    for item in items:
        group = group_of(item)
        item.add_marker(pytest.mark.xdist_group(group))
        if group == SHARED_STACK:
            item.add_marker(pytest.mark.shared_stack)
