"""The soak's statistics: nearest-rank percentiles, RSS slopes and the plateau verdict."""

from __future__ import annotations

import math

from reef_dev.stats import percentile, plateau, slope_per_minute


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values[:10], 99) == 10.0  # a small window's p99 is its maximum
    assert math.isnan(percentile([], 99))


def test_slope_is_per_minute() -> None:
    assert slope_per_minute([(t, 100 + t / 10) for t in range(0, 300, 5)]) == 6.0
    assert math.isnan(slope_per_minute([(0.0, 1.0), (5.0, 2.0)]))


def test_a_warm_up_step_then_flat_memory_plateaus() -> None:
    points = [(float(t), 900.0 if t < 60 else 1800.0 + (t % 10) / 10) for t in range(0, 600, 5)]
    verdict = plateau(points, 600)
    assert verdict.first_half > 100 and abs(verdict.second_half) < 0.1
    assert round(verdict.threshold, 2) == 1.8 and verdict.plateaus


def test_a_steady_climb_in_the_second_half_does_not_plateau() -> None:
    points = [(float(t), 1000.0 + 3.0 * t / 60) for t in range(0, 600, 5)]
    verdict = plateau(points, 600)
    assert round(verdict.second_half, 6) == 3.0 and not verdict.plateaus
