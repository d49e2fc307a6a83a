"""Stream processors: deterministic (state, event) → outputs, hosted on Kafka (streams/) or embedded."""
