"""Faust hosting of Reef's stream processors on Kafka (``reef streams``)."""
