"""Percentiles from a latency histogram (bucket index -> count, streams/telemetry/delivery_schema.py): the upper bound
of the bucket in which the quantile falls, so exact to one bucket (19 %) however many histograms were summed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from streams.telemetry.delivery_schema import bucket_upper_ms

QUANTILES = (0.5, 0.95, 0.99)


def percentiles(histogram: Mapping[int, int], quantiles: Iterable[float] = QUANTILES) -> dict[float, float | None]:
    """Each quantile's latency in ms (None when the histogram is empty)."""
    total = sum(histogram.values())
    found: dict[float, float | None] = {}
    ordered = sorted((index, count) for index, count in histogram.items() if count > 0)
    for quantile in quantiles:
        if total == 0:
            found[quantile] = None
            continue
        rank, seen = quantile * total, 0
        for index, count in ordered:
            seen += count
            if seen >= rank:
                found[quantile] = bucket_upper_ms(index)
                break
    return found
