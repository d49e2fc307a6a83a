"""The local development and test stack: Kafka (KRaft) and an S3-compatible store.

``scripts/stack up|down|status|env`` drives it (see :mod:`reef_dev.stack.cli`); the
pytest fixtures in ``tests/stack_plugin.py`` start it lazily.
"""

from reef_dev.stack.paths import StackSettings, load_settings
from reef_dev.stack.process import StackError

__all__ = ["StackError", "StackSettings", "load_settings"]
