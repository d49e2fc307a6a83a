"""API tests: the app ``reef serve --log embedded`` builds, run in this process
(tests/support/embedded_app.py), talked to over httpx's ASGI transport or, for the
official SDKs, a loopback socket. No Kafka, no S3, no ``reef serve`` process.

* ``app_factory`` (module): starts :class:`EmbeddedApp` s (keywords of its constructor),
  each on a state dir of its own unless given one, stopped at module end.
* ``app_options`` (module): override in a module to configure its ``reef_app``.
* ``reef_app`` (module): ``app_factory(**app_options)``.

A test during which an app's processors stopped fails, with what stopped them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.embedded_app import AppFactory, EmbeddedApp

_STARTED: list[EmbeddedApp] = []


@pytest.fixture(scope="module")
def app_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppFactory]:
    started: list[EmbeddedApp] = []

    def start(**options: Any) -> EmbeddedApp:
        state_dir = options.pop("state_dir", None) or tmp_path_factory.mktemp("state")
        app = EmbeddedApp(state_dir, **options)
        started.append(app)
        _STARTED.append(app)
        return app

    yield start
    for app in started:
        app.stop()
        _STARTED.remove(app)


@pytest.fixture(scope="module")
def app_options() -> dict[str, Any]:
    """Override in a module to configure its ``reef_app`` (``app_factory`` keywords)."""
    return {}


@pytest.fixture(scope="module")
def reef_app(app_factory: AppFactory, app_options: dict[str, Any]) -> EmbeddedApp:
    return app_factory(**app_options)


@pytest.fixture(autouse=True)
def _processors_keep_running() -> Iterator[None]:
    yield
    failures = [(app, app.failure()) for app in _STARTED]
    stopped = [f"{app.state_dir}: {failure!r}" for app, failure in failures if failure]
    if stopped:
        pytest.fail("the embedded processors stopped during the test:\n" + "\n".join(stopped))
