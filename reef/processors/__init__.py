"""Stream processors: deterministic (state, event) → outputs, hosted on Kafka or embedded."""
