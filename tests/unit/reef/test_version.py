"""Reef reports one version everywhere: the installed distribution's (pyproject.toml)."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import httpx
from click.testing import CliRunner

import reef
from reef.cli import main
from reef.settings import Settings
from reef.wiring import create_app

INSTALLED = version("reef")


def test_the_package_version_is_the_installed_distributions() -> None:
    assert reef.__version__ == INSTALLED


def test_reef_version_prints_it() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"reef, version {INSTALLED}\n"


async def test_status_and_openapi_report_it(tmp_path: Path) -> None:
    settings = Settings.of(
        log="embedded",
        state_dir=tmp_path,
        token="tok",
        serve_role="api",  # the API alone: no processors, trainer or engine
        upstream_url="http://127.0.0.1:9/v1",  # never asked: no exchange is made
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://reef") as client:
            status = await client.get("/reef/status", headers={"Authorization": "Bearer tok"})
            schema = await client.get("/openapi.json")
    assert status.status_code == 200, status.text
    assert status.json()["version"] == INSTALLED
    assert schema.json()["info"]["version"] == INSTALLED
