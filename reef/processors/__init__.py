"""Stream processors: deterministic (state, event) → outputs, hosted by Faust or embedded."""
