"""Latency distributions: an hdrh histogram in integer µs that never silently loses a value.

Range 1 µs .. 1 h at 3 significant figures (docs/measurement.md). A value over the range is clamped
to the top and counted in ``over_range``; a value under 1 µs is recorded as 0 (a real, sub-µs
measurement). ``record_corrected_value`` is never used: latencies already count from the intended
send time, and correcting again would double count. Percentiles are computed from the histogram
alone, so a histogram decoded from ``metrics.json`` reproduces every reported figure exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np  # imported here, not on first use: a lazy import would stall the event loop mid-run
from hdrh.histogram import HdrHistogram

from loadtest.core.units import PERCENTILE_NAMES, PERCENTILES

LOWEST_US = 1
HIGHEST_US = 3_600_000_000
SIGNIFICANT_FIGURES = 3
GAPS_AT_ONCE = 24  # stamps from which numpy records their gaps faster than a loop does


def _bucket_values(hdr: HdrHistogram, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each counts index's lowest value and its bucket's width (µs): hdrh's
    ``get_value_from_index``, vectorised."""
    half = hdr.sub_bucket_half_count
    bucket = (index >> hdr.sub_bucket_half_count_magnitude) - 1
    sub = (index & (half - 1)) + half
    first = bucket < 0  # the first bucket also holds the lower half of its sub-buckets
    sub = np.where(first, sub - half, sub)
    bucket = np.where(first, 0, bucket)
    return sub << (bucket + hdr.unit_magnitude), np.int64(1) << (bucket + hdr.unit_magnitude)


_LOWEST: dict[tuple[int, int, int], np.ndarray] = {}


def _lowest_values(hdr: HdrHistogram) -> np.ndarray:
    """Every counts index's lowest value, ascending: a value's index is found by bisection,
    one numpy call for a stream's gaps where hdrh's arithmetic took a dozen. Made once a
    layout, at import for loadtest's own (never on the event loop mid-run)."""
    layout = (hdr.counts_len, hdr.unit_magnitude, hdr.sub_bucket_half_count_magnitude)
    table = _LOWEST.get(layout)
    if table is None:
        index = np.arange(hdr.counts_len, dtype=np.int64)
        table = _LOWEST[layout] = _bucket_values(hdr, index)[0]
    return table


_lowest_values(HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES))


class LatencyHistogram:
    """Integer-µs HDR histogram plus the count of values clamped at the top of the range."""

    __slots__ = ("hdr", "over_range", "_view")

    def __init__(self, hdr: HdrHistogram | None = None, over_range: int = 0) -> None:
        self.hdr = hdr or HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)
        self.over_range = over_range
        self._view: np.ndarray | None = None

    def record_ns(self, ns: int) -> None:
        self.record_us(ns // 1000)

    def record_us(self, us: int) -> None:
        if us > HIGHEST_US:
            self.over_range += 1
            us = HIGHEST_US
        elif us < 0:
            raise ValueError(f"negative latency {us} µs: timestamps out of order")
        self.hdr.record_value(us)

    def record_gaps_ns(self, stamps: Sequence[int]) -> None:
        """Each gap between successive ``stamps`` (ns), as ``record_ns`` would record them one
        by one, in one pass: a stream's inter-token gaps, recorded as its request finishes.
        Done in Python that cost 1.3 µs a gap on the event loop (a 256-token stream held it
        0.33 ms, long enough to make other streams' reads late); numpy finds every gap's
        bucket at once, by bisection in a table of each bucket's lowest value."""
        if len(stamps) < GAPS_AT_ONCE:
            prev = stamps[0] if stamps else 0
            for t in stamps[1:]:
                self.record_us((t - prev) // 1000)
                prev = t
            return
        us = np.diff(np.fromiter(stamps, dtype=np.int64, count=len(stamps))) // 1000
        low, high = int(us.min()), int(us.max())
        if low < 0:
            raise ValueError(f"negative latency {low} µs: timestamps out of order")
        if high > HIGHEST_US:
            self.over_range += int(np.count_nonzero(us > HIGHEST_US))
            us, high = np.minimum(us, HIGHEST_US), HIGHEST_US
        hdr = self.hdr
        # each gap's bucket: the last whose lowest value is at or under it (hdrh's own index)
        index = _lowest_values(hdr).searchsorted(us, side="right") - 1
        first = int(index.min())  # gaps cluster: a count per index over their span only
        per = np.bincount(index - first)
        hit = np.flatnonzero(per)
        counts = self._counts()
        counts[hit + first] += per[hit].astype(counts.dtype)
        hdr.total_count += len(us)
        hdr.min_value = min(hdr.min_value, low)
        hdr.max_value = max(hdr.max_value, high)

    def _counts(self) -> np.ndarray:
        """The hdr's counts as a numpy view, made once (a view costs µs; hdrh makes its counts
        array once, with the histogram)."""
        if self._view is None:
            self._view = np.ctypeslib.as_array(self.hdr.counts)[: self.hdr.counts_len]
        return self._view

    @property
    def count(self) -> int:
        return self.hdr.get_total_count()

    def add(self, other: LatencyHistogram) -> None:
        # An empty histogram's min reads 0 in hdrh: merged in, it would make the minimum 0.
        """Merge another histogram into this one (lossless)."""
        if other.hdr.total_count:
            self.hdr.add(other.hdr)
        self.over_range += other.over_range

    # hdrh's own percentile, mean and stddev walk every bucket in Python (tens of ms on a wide
    # histogram, run on the event loop at each interval's close). These give the same figures
    # from the non-empty buckets only, with numpy.

    def percentile_ms(self, p: float) -> float:
        """Exactly ``hdr.get_value_at_percentile(p)`` / 1000."""
        return self.percentiles_ms((p,))[0]

    def percentiles_ms(self, ps: Sequence[float]) -> list[float]:
        """Several percentiles from one pass over the buckets (the interval close asks for six)."""
        total = self.hdr.total_count
        if total == 0:
            return [0.0] * len(ps)
        lowest, highest, counts = self._buckets()
        cum = np.cumsum(counts)
        out = []
        for p in ps:
            target = max(int(min(p, 100.0) * total / 100 + 0.5), 1)
            i = min(int(np.searchsorted(cum, target)), len(counts) - 1)
            out.append(float(highest[i] if p else lowest[i]) / 1000.0)
        return out

    def digest(
        self, bounds_us: Sequence[int], ps: Sequence[float]
    ) -> tuple[list[int], float, list[float]]:
        """What a metrics endpoint exports, from one pass over the buckets: the count at or under
        each bound (a bucket counts when its highest equivalent value does), the sum (µs, each
        bucket at its median equivalent value, as ``mean_us``) and ``percentiles_ms(ps)``."""
        total = self.hdr.total_count
        if total == 0:
            return [0] * len(bounds_us), 0.0, [0.0] * len(ps)
        lowest, highest, counts = self._buckets()
        cum = np.cumsum(counts)
        at = np.searchsorted(highest, np.asarray(bounds_us, dtype=np.int64), side="right")
        under = [int(cum[i - 1]) if i else 0 for i in at.tolist()]
        sum_us = float(((lowest + (highest - lowest + 1) // 2) * counts).sum())
        quantiles = []
        for p in ps:
            target = max(int(min(p, 100.0) * total / 100 + 0.5), 1)
            i = min(int(np.searchsorted(cum, target)), len(counts) - 1)
            quantiles.append(float(highest[i] if p else lowest[i]) / 1000.0)
        return under, sum_us, quantiles

    def mean_us(self) -> float:
        """Exactly ``hdr.get_mean_value()``: each bucket at its median equivalent value."""
        lowest, highest, counts = self._buckets()
        if not self.hdr.total_count:
            return 0.0
        return float(((lowest + (highest - lowest + 1) // 2) * counts).sum()) / self.hdr.total_count

    def stddev_us(self) -> float:
        """As ``hdr.get_stddev()``."""
        lowest, highest, counts = self._buckets()
        if not self.hdr.total_count:
            return 0.0
        dev = (lowest + (highest - lowest + 1) // 2) - self.mean_us()
        return float(np.sqrt((dev * dev * counts).sum() / self.hdr.total_count))

    def count_above_us(self, threshold_us: int) -> int:
        """How many recorded values are certainly above ``threshold_us`` (bucket-exact)."""
        values, counts = self.recorded()
        return int(counts[values > threshold_us].sum())

    def recorded(self) -> tuple[np.ndarray, np.ndarray]:
        """``(values, counts)``: numpy arrays over the non-empty buckets, ascending; each value is
        the bucket's highest equivalent value, the figure hdrh reports for a percentile in it."""
        _, highest, counts = self._buckets()
        return highest, counts

    def _buckets(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each non-empty bucket's lowest and highest equivalent value and its count: hdrh's
        ``get_value_from_index`` and ``get_highest_equivalent_value``, vectorised (a Python call
        per bucket took milliseconds on a wide histogram, on the event loop)."""
        all_counts = self._counts()
        index = np.flatnonzero(all_counts).astype(np.int64)
        lowest, width = _bucket_values(self.hdr, index)
        return lowest, lowest + width - 1, all_counts[index].astype(np.int64)

    def summary_ms(self) -> dict:
        """``{count, mean, stddev, min, p50, p90, p95, p99, p999, max, over_range}`` in ms."""
        n = self.count
        if n == 0:
            return {"count": 0, "over_range": self.over_range}
        out = {
            "count": n,
            "mean": round(self.mean_us() / 1000.0, 6),
            "stddev": round(self.stddev_us() / 1000.0, 6),
            "min": self.hdr.get_min_value() / 1000.0,
        }
        for name, v in zip(PERCENTILE_NAMES, self.percentiles_ms(PERCENTILES)):
            out[name] = v
        out["max"] = self.hdr.get_max_value() / 1000.0
        out["over_range"] = self.over_range
        return out

    def encode(self) -> str:
        """The hdrh compressed encoding (itself base64 text), safe to put in JSON."""
        return self.hdr.encode().decode("ascii")

    @classmethod
    def decode(cls, text: str, over_range: int = 0) -> LatencyHistogram:
        """A histogram from its ``encode()`` text."""
        return cls(HdrHistogram.decode(text.encode("ascii")), over_range)

    def __reduce__(self) -> tuple[Any, tuple[str, int]]:
        # pickled as its lossless encoding: a worker process's histograms reach its parent
        return (LatencyHistogram.decode, (self.encode(), self.over_range))


def merge(histograms: Iterable[LatencyHistogram]) -> LatencyHistogram:
    """One histogram holding every value of the given ones."""
    total = LatencyHistogram()
    for h in histograms:
        total.add(h)
    return total


__all__ = ["LatencyHistogram", "merge", "PERCENTILES", "PERCENTILE_NAMES"]
