"""Statistics of measurements over time: nearest-rank percentiles, least-squares slopes
and the memory-plateau verdict of a soak run (``bench/soak.py``).

Pure functions of their arguments; no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# ---------------------------------------------------------------------------
# Pure statistics


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def slope_per_minute(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute; NaN under 3 points."""
    if len(points) < 3:
        return math.nan
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return math.nan
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 60.0


@dataclass(frozen=True)
class Plateau:
    first_half: float  # MB/min
    second_half: float  # MB/min
    threshold: float  # MB/min
    plateaus: bool


def plateau(points: list[tuple[float, float]], duration: float) -> Plateau:
    """The memory verdict on (seconds, MB) points (see the module doc for the criterion)."""
    half = duration / 2
    first = slope_per_minute([p for p in points if p[0] <= half])
    second = slope_per_minute([p for p in points if p[0] >= half])
    final = points[-1][1] if points else 0.0
    threshold = max(1.0, 0.001 * final)
    return Plateau(first, second, threshold, not math.isnan(second) and second < threshold)
