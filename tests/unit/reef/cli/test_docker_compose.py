"""docker/compose.yaml cannot run here (no Docker engine); keep it honest against the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from reef.cli import main
from reef.settings import ENV_PREFIX
from reef.settings import names as setting_names

COMPOSE = Path(__file__).resolve().parents[4] / "docker" / "compose.yaml"


def services() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(COMPOSE.read_text())
    found: dict[str, dict[str, Any]] = document["services"]
    return found


def reef_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services().items() if "build" in s}


def test_the_cluster_has_three_brokers_and_an_object_store() -> None:
    names = set(services())
    assert {"kafka-1", "kafka-2", "kafka-3", "s3"} <= names
    assert {"api-1", "api-2", "streams-1", "streams-2"} <= names


@pytest.mark.parametrize("name", sorted(reef_services()))
def test_every_reef_service_runs_a_real_command_with_real_flags(name: str) -> None:
    command = reef_services()[name]["command"]
    sub = main.get_command(click.Context(main), command[0])
    assert isinstance(sub, click.Command), f"{name}: no `reef {command[0]}` command"
    if isinstance(sub, click.Group):
        sub = sub.get_command(click.Context(sub), command[1])
        assert sub is not None, f"{name}: no `reef {command[0]} {command[1]}` command"
        command = command[1:]
    known = {opt for param in sub.params for opt in getattr(param, "opts", [])}
    flags = [arg for arg in command[1:] if arg.startswith("--")]
    assert set(flags) <= known, f"{name}: unknown flags {set(flags) - known}"


@pytest.mark.parametrize("name", sorted(reef_services()))
def test_every_reef_environment_variable_is_a_setting(name: str) -> None:
    settings = {ENV_PREFIX + name.upper() for name in setting_names()}
    env = reef_services()[name].get("environment", {})
    reef_vars = {key for key in env if key.startswith(ENV_PREFIX)}
    assert reef_vars <= settings, f"{name}: not settings: {reef_vars - settings}"


def test_published_api_ports_match_the_serve_port() -> None:
    for name, service in reef_services().items():
        command = service["command"]
        if command[0] != "serve":
            continue
        port = command[command.index("--port") + 1]
        assert any(mapping.endswith(f":{port}") for mapping in service["ports"]), name


def test_the_dockerfile_installs_every_package_the_wheel_needs() -> None:
    dockerfile = (COMPOSE.parent / "Dockerfile").read_text()
    for folder in ("reef", "streams", "recipes", "trainers", "schemas"):
        assert f"COPY {folder} ./{folder}" in dockerfile
