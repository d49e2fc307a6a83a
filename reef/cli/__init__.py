"""The ``reef`` command: one group, one module per command in this package.

Sub-commands are imported when they run (or when ``reef --help`` lists them), so a
command pays only for what it uses: ``reef status`` does not load the API, and
``python -m reef.cli.engine`` does not load the trainer. Options that several commands
share live in :mod:`reef.cli.options`.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

import click

from reef.core.errors import ReefError

#: command name -> "module:attribute" of its click command
COMMANDS: Final = {
    "audit": "reef.cli.audit:audit_group",
    "demo": "reef.cli.demo:demo",
    "engine": "reef.cli.engine:engine",
    "export": "reef.cli.export:export",
    "git": "reef.cli.git:git",
    "harness": "reef.cli.harness:harness",
    "judge": "reef.cli.judge:judge",
    "log": "reef.cli.log:log",
    "replay": "reef.cli.replay:replay_command",
    "samples": "reef.cli.samples:samples",
    "serve": "reef.cli.serve:serve",
    "sidecar": "reef.cli.sidecar:sidecar",
    "status": "reef.cli.status:status",
    "streams": "reef.cli.streams:streams",
    "topics": "reef.cli.log:topics",
    "trainer": "reef.cli.trainer:trainer",
}


class ReefGroup(click.Group):
    """Loads sub-commands on demand, and turns Reef's own errors into a one-line message
    and exit status 1, not a traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command), target
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ReefError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


@click.group(cls=ReefGroup)
@click.version_option(package_name="reef", prog_name="reef")
def main() -> None:
    """Reef: continual-learning infrastructure for LLM agents."""
