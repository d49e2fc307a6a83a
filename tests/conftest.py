"""Shared fixtures. The local stack fixtures (Kafka, S3) live in tests/stack_plugin.py.

A failed test's report carries the output of every ``reef serve`` still running (its
logs say what the server did meanwhile: a CI failure is then diagnosable from the log).
"""

from collections.abc import Generator
from typing import Any

import pytest

from tests.support.reef_server import running_servers_output
from tests.support.scheduling import assign_groups

pytest_plugins = ["tests.stack_plugin"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.failed and report.when == "call":
        for n, text in enumerate(running_servers_output(), 1):
            report.sections.append((f"reef serve {n} (running)", text))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    assign_groups(items)
