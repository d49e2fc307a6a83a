"""Processor hosts beside the Kafka one in ``streams/``: the embedded host and its state."""

from typing import Final

#: what a ``reef streams`` host logs once it processes its input (on either log)
READY_LINE: Final = "reef streams: ready"
