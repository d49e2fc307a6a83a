"""The ``reef`` command: one group, each sub-command defined next to what it drives."""

from __future__ import annotations

from typing import Any

import click

from reef import __version__
from reef.audit_cli import audit_group
from reef.core.errors import ReefError
from reef.demo import demo
from reef.engine.cli import engine
from reef.export import export
from reef.git_cli import git
from reef.log.cli import log, topics
from reef.replay_cli import replay_command
from reef.serve import serve
from reef.sidecar.cli import sidecar
from reef.stack.cli import stack
from reef.status_cli import status
from reef.streams_cli import streams
from trainers.cli import trainer


class ReefGroup(click.Group):
    """Turns Reef's own errors into a one-line message and exit status 1, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ReefError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


@click.group(cls=ReefGroup)
@click.version_option(__version__, prog_name="reef")
def main() -> None:
    """Reef: continual-learning infrastructure for LLM agents."""


main.add_command(log)
main.add_command(topics)
main.add_command(serve)
main.add_command(replay_command)
main.add_command(streams)
main.add_command(stack)
main.add_command(git)
main.add_command(status)
main.add_command(audit_group)
main.add_command(export)
main.add_command(sidecar)
main.add_command(engine)
main.add_command(trainer)
main.add_command(demo)


if __name__ == "__main__":
    main()
