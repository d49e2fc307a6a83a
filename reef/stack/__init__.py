"""The local development and test stack: Kafka (KRaft) and an S3-compatible store.

``reef stack up|down|status|env`` drives it (see :mod:`reef.cli.stack`); the
pytest fixtures in ``tests/stack_plugin.py`` start it lazily.
"""

from reef.stack.paths import StackSettings, load_settings
from reef.stack.process import StackError

__all__ = ["StackError", "StackSettings", "load_settings"]
