"""The ``reef`` command: one group, each sub-command defined next to what it drives."""

from __future__ import annotations

import click

from reef import __version__
from reef.log.cli import log, topics
from reef.serve import serve


@click.group()
@click.version_option(__version__, prog_name="reef")
def main() -> None:
    """Reef: continual-learning infrastructure for LLM agents."""


main.add_command(log)
main.add_command(topics)
main.add_command(serve)

try:  # the local development stack lives beside the package (reef.stack)
    from reef.stack.cli import stack
except ImportError:  # pragma: no cover - during bootstrap before reef.stack exists
    pass
else:
    main.add_command(stack)
