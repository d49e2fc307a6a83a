"""Golden payloads: one single-object-encoded event per type, written once and kept."""
