"""Latency distributions: an hdrh histogram in integer µs that never silently loses a value.

Range 1 µs .. 1 h at 3 significant figures (docs/measurement.md). A value over the range is clamped
to the top and counted in ``over_range``; a value under 1 µs is recorded as 0 (a real, sub-µs
measurement). ``record_corrected_value`` is never used: latencies already count from the intended
send time, and correcting again would double count. Percentiles are computed from the histogram
alone, so a histogram decoded from ``metrics.json`` reproduces every reported figure exactly.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
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


def _add_gaps(hdr: HdrHistogram, counts: np.ndarray, us: np.ndarray) -> None:
    """Values (µs, each in range) recorded as hdrh's ``record_value`` would, one numpy pass:
    each one's bucket found by bisection in a table of each bucket's lowest value (hdrh's own
    index), and the counts added straight into ``counts``, a view of hdrh's ``counts``."""
    index = _lowest_values(hdr).searchsorted(us, side="right") - 1
    first = int(index.min())  # values cluster: a count per index over their span only
    per = np.bincount(index - first)
    hit = np.flatnonzero(per)
    counts[hit + first] += per[hit].astype(counts.dtype)
    hdr.total_count += len(us)
    hdr.min_value = min(hdr.min_value, int(us.min()))
    hdr.max_value = max(hdr.max_value, int(us.max()))


def _counts_view(hdr: HdrHistogram) -> np.ndarray:
    return np.ctypeslib.as_array(hdr.counts)[: hdr.counts_len]


def _buckets_at_once(hdr: HdrHistogram, counts: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each non-empty bucket's lowest and highest equivalent value and its count, from a view
    of hdrh's counts: ``get_value_from_index`` and ``get_highest_equivalent_value`` vectorised."""
    index = np.flatnonzero(counts).astype(np.int64)
    lowest, width = _bucket_values(hdr, index)
    return lowest, lowest + width - 1, counts[index].astype(np.int64)


def _buckets_by_hdrh(hdr: HdrHistogram) -> tuple[np.ndarray, ...]:
    """The same through hdrh's public iterator: a Python call or two per bucket."""
    steps = [
        (s.value_iterated_to, s.count_at_value_iterated_to) for s in hdr.get_recorded_iterator()
    ]
    highest = np.array([v for v, _ in steps], dtype=np.int64)
    lowest = np.array([hdr.get_lowest_equivalent_value(v) for v, _ in steps], dtype=np.int64)
    return lowest, highest, np.array([c for _, c in steps], dtype=np.int64)


def _layout_as_read() -> bool:
    """Whether the installed hdrh lays out its counts as ``_add_gaps`` and
    ``_buckets_at_once`` read and write them (its fields ``counts``, ``counts_len``,
    ``total_count``, ``min_value``, ``max_value`` and its bucket arithmetic are not its
    documented API): checked once, at import, against its own ``record_value`` and iterator.
    Where it is not, every value and bucket goes through hdrh's public API (``FAST``)."""
    values = [0, 1, 5, 5, 2047, 2048, 2049, 65_535, 1_000_003, 123_456_789, HIGHEST_US]
    try:
        public = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)
        for v in values:
            public.record_value(v)
        direct = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)
        _add_gaps(direct, _counts_view(direct), np.array(values, dtype=np.int64))
        mine, hdrhs = _buckets_at_once(direct, _counts_view(direct)), _buckets_by_hdrh(public)
        return (
            direct.encode() == public.encode()
            and direct.get_total_count() == public.get_total_count() == len(values)
            and direct.get_min_value() == public.get_min_value()
            and direct.get_max_value() == public.get_max_value()
            and all(np.array_equal(a, b) for a, b in zip(mine, hdrhs))
        )
    except (AttributeError, TypeError, ValueError, IndexError):
        return False


FAST = _layout_as_read()  # made at import for loadtest's own layout (never mid-run)


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
        0.33 ms, long enough to make other streams' reads late); ``_add_gaps`` records them in
        one numpy pass (hdrh's ``record_value`` once per bucket instead took 2-10 times as
        long: ``bench/histogram_writes.py``)."""
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
            us = np.minimum(us, HIGHEST_US)
        if FAST:
            _add_gaps(self.hdr, self._counts(), us)
        else:
            record = self.hdr.record_value
            for v in us.tolist():
                record(v)

    def _counts(self) -> np.ndarray:
        """The hdr's counts as a numpy view, made once (a view costs µs; hdrh makes its counts
        array once, with the histogram)."""
        if self._view is None:
            self._view = _counts_view(self.hdr)
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

    def _buckets(self) -> tuple[np.ndarray, ...]:
        """Each non-empty bucket's lowest and highest equivalent value and its count (at once:
        a Python call per bucket took milliseconds on a wide histogram, on the event loop)."""
        return _buckets_at_once(self.hdr, self._counts()) if FAST else _buckets_by_hdrh(self.hdr)

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
        """A histogram from its ``encode()`` text (``check_encoded``'s bounds first)."""
        return cls(HdrHistogram.decode(check_encoded(text).encode("ascii")), over_range)

    def __reduce__(self) -> tuple[Any, tuple[str, int]]:
        # pickled as its lossless encoding: a worker process's histograms reach its parent
        return (LatencyHistogram.decode, (self.encode(), self.over_range))


# An encoded histogram of loadtest's layout is at most a few hundred KB: each count a LEB128
# word of at most 9 bytes, behind a 40-byte header, compressed, then base64
_COUNTS = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES).counts_len
MAX_DECODED_BYTES = 40 + 9 * _COUNTS
MAX_ENCODED_CHARS = 4 * MAX_DECODED_BYTES  # base64 of zlib's worst case, and then some
_PAYLOAD = struct.Struct(">IIIIqqd")  # hdrh's payload header


def check_encoded(text: str) -> str:
    """``text`` if it is a histogram of loadtest's layout whose counts fit that layout;
    ``ValueError`` otherwise, before anything is inflated past that size (a small file can
    hold a zlib bomb) or allocated for another layout's range."""
    if not isinstance(text, str) or len(text) > MAX_ENCODED_CHARS:
        raise ValueError(f"an encoded histogram over {MAX_ENCODED_CHARS:,} characters")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("an encoded histogram that is not base64") from None
    if len(raw) < 8:
        raise ValueError("an encoded histogram too short to hold its header")
    inflate = zlib.decompressobj()
    try:
        payload = inflate.decompress(raw[8:], MAX_DECODED_BYTES + 1)
    except zlib.error as exc:
        raise ValueError(f"an encoded histogram that does not inflate: {exc}") from None
    if len(payload) > MAX_DECODED_BYTES or inflate.unconsumed_tail:
        raise ValueError(f"an encoded histogram that inflates past {MAX_DECODED_BYTES:,} bytes")
    if len(payload) < _PAYLOAD.size:
        raise ValueError("an encoded histogram too short to hold its header")
    _, _, _, figures, lowest, highest, _ = _PAYLOAD.unpack_from(payload)
    if (figures, lowest, highest) != (SIGNIFICANT_FIGURES, LOWEST_US, HIGHEST_US):
        raise ValueError(
            f"a histogram of another layout ({figures} figures, {lowest}..{highest} µs)"
        )
    return text


def merge(histograms: Iterable[LatencyHistogram]) -> LatencyHistogram:
    """One histogram holding every value of the given ones."""
    total = LatencyHistogram()
    for h in histograms:
        total.add(h)
    return total


__all__ = ["LatencyHistogram", "merge", "PERCENTILES", "PERCENTILE_NAMES"]
