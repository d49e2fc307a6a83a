"""Processor hosts beside the Kafka one in ``streams/``: the embedded host and its state."""
