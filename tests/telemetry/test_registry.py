"""A histogram series keeps its count per bucket, its sum, and the least and greatest value seen."""

from __future__ import annotations

import math

from telemetry.registry import Histogram, Kind, MetricSpec


def test_a_histogram_series_keeps_counts_sum_min_and_max() -> None:
    histogram = Histogram(MetricSpec("x", Kind.HISTOGRAM, "s", "a test", ("a",), (0.1, 1.0)))
    for value in (0.5, 0.05, 3.0, 0.7):
        histogram.observe(("one",), value)
    series = histogram.series[("one",)]
    assert series.counts == [1, 2, 1]
    assert math.isclose(series.sum, 4.25)
    assert (series.min, series.max) == (0.05, 3.0)
    histogram.observe(("two",), 0.2)
    assert (histogram.series[("two",)].min, histogram.series[("two",)].max) == (0.2, 0.2)
