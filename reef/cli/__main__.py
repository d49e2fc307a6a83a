"""``python -m reef.cli``: the ``reef`` command."""

from reef.cli import main

main()
