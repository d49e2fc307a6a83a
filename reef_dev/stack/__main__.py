"""``python -m reef_dev.stack up|down|status|env`` (``scripts/stack``)."""

from reef_dev.stack.cli import main

main()
