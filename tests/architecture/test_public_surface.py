"""The user-facing surface does not change by accident: the ``reef`` command tree and the
OpenAPI document are compared with snapshots checked into ``snapshots/``.

A deliberate change regenerates them (``REEF_UPDATE_SNAPSHOTS=1 pytest
tests/architecture/test_public_surface.py``) and the diff is reviewed with the change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from reef.cli import main
from reef.settings import Settings
from reef.wiring import create_app

SNAPSHOTS = Path(__file__).with_name("snapshots")


def _param(param: click.Parameter) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": param.name,
        "kind": type(param).__name__,
        "opts": sorted(param.opts) + sorted(param.secondary_opts),
        "type": param.type.name,
        "required": param.required,
        "multiple": param.multiple,
        "nargs": param.nargs,
    }
    if isinstance(param.type, click.Choice):
        out["choices"] = list(param.type.choices)
    if isinstance(param, click.Option):
        out["is_flag"] = param.is_flag
        out["envvar"] = param.envvar
        out["help"] = param.help
        default = param.default
        plain = isinstance(default, str | int | float | bool | None)
        out["default"] = default if plain else repr(default)
    return out


def command_tree(command: click.Command, name: str) -> dict[str, Any]:
    """Name, help, parameters and sub-commands of ``command``, recursively."""
    node: dict[str, Any] = {
        "name": name,
        "help": command.help,
        "hidden": command.hidden,
        "params": [_param(p) for p in command.params],
    }
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        subs = {name: command.get_command(ctx, name) for name in command.list_commands(ctx)}
        node["commands"] = [
            command_tree(sub, name) for name, sub in sorted(subs.items()) if sub is not None
        ]
    return node


def openapi_document() -> dict[str, Any]:
    app = create_app(Settings.of(log="embedded", insecure=True))
    document: dict[str, Any] = app.openapi()
    return document


def _check(name: str, current: dict[str, Any]) -> None:
    path = SNAPSHOTS / name
    text = json.dumps(current, indent=1, sort_keys=True) + "\n"
    if os.environ.get("REEF_UPDATE_SNAPSHOTS") == "1":
        path.write_text(text)
    assert path.is_file(), f"no snapshot {path}: run with REEF_UPDATE_SNAPSHOTS=1"
    assert json.loads(path.read_text()) == current, (
        f"{name} changed; if deliberate, regenerate with REEF_UPDATE_SNAPSHOTS=1 "
        "and review the diff"
    )


def test_the_command_tree_matches_its_snapshot() -> None:
    _check("cli.json", command_tree(main, "reef"))


def test_the_openapi_document_matches_its_snapshot() -> None:
    _check("openapi.json", openapi_document())
