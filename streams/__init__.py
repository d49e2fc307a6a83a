"""Reef's exactly-once host of the stream processors on Kafka (``reef streams``)."""
