import contextlib
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.core import histogram
from loadtest.core.histogram import HIGHEST_US, LatencyHistogram, merge

# the fast paths (hdrh's counts read and written at once) and hdrh's public API give one answer
PATHS = pytest.mark.parametrize("fast", [True, False], ids=["at-once", "hdrh-api"])


@contextlib.contextmanager
def _path(fast: bool):
    before, histogram.FAST = histogram.FAST, fast
    try:
        yield
    finally:
        histogram.FAST = before


def test_over_range_is_counted_and_clamped_not_dropped():
    h = LatencyHistogram()
    h.record_us(5)
    h.record_us(HIGHEST_US + 10)
    assert h.count == 2
    assert h.over_range == 1
    assert h.summary_ms()["over_range"] == 1


def test_sub_microsecond_is_recorded_as_zero():
    h = LatencyHistogram()
    h.record_ns(400)
    assert h.count == 1 and h.hdr.get_max_value() == 0


def test_decoded_histogram_reproduces_every_percentile_exactly():
    h = LatencyHistogram()
    for v in range(1, 20_000, 7):
        h.record_us(v * 13)
    again = LatencyHistogram.decode(h.encode())
    assert again.summary_ms() == h.summary_ms()


def test_merge_equals_histogram_of_the_union():
    parts = [LatencyHistogram() for _ in range(3)]
    union = LatencyHistogram()
    for i in range(9000):
        v = (i * 7919) % 100_000 + 1
        parts[i % 3].record_us(v)
        union.record_us(v)
    assert merge(parts).summary_ms() == union.summary_ms()


def test_count_above_is_exact_at_bucket_edges():
    h = LatencyHistogram()
    for v in (100, 200, 300, 400):
        h.record_us(v)
    assert h.count_above_us(250) == 2
    assert h.count_above_us(400) == 0
    assert h.count_above_us(99) == 4


@PATHS
def test_fast_statistics_equal_hdrh_own(fast):
    """percentile_ms / mean / stddev are numpy re-implementations: they must equal hdrh's exactly."""
    import random

    rng = random.Random(7)
    with _path(fast):
        _statistics_equal_hdrh_own(rng)


def _statistics_equal_hdrh_own(rng):
    for spread in (10, 5_000, 2_000_000):
        h = LatencyHistogram()
        for _ in range(5000):
            h.record_us(int(rng.expovariate(1 / spread)))
        ps = (0, 0.1, 1, 25, 50, 90, 95, 99, 99.9, 99.99, 100)
        for p in ps:
            assert h.percentile_ms(p) == h.hdr.get_value_at_percentile(p) / 1000.0, (spread, p)
        assert h.percentiles_ms(ps) == [h.hdr.get_value_at_percentile(p) / 1000.0 for p in ps]
        assert h.mean_us() == pytest.approx(h.hdr.get_mean_value(), rel=1e-12)
        assert h.stddev_us() == pytest.approx(h.hdr.get_stddev(), rel=1e-9)
    empty = LatencyHistogram()
    assert empty.percentile_ms(99) == empty.hdr.get_value_at_percentile(99) / 1000.0 == 0.0


@PATHS
def test_bucket_bounds_are_hdrhs_own_at_every_index(fast):
    """The vectorised bucket walk gives, for every one of the counts array's indexes, exactly
    hdrh's ``get_value_from_index`` and ``get_highest_equivalent_value``."""
    import numpy as np

    h = LatencyHistogram()
    hdr = h.hdr
    np.ctypeslib.as_array(hdr.counts)[: hdr.counts_len] = 1  # every bucket non-empty
    hdr.total_count, hdr.max_value = hdr.counts_len, HIGHEST_US  # as hdrh's iterator needs
    with _path(fast):
        lowest, highest, counts = h._buckets()
    expected_lowest = [hdr.get_value_from_index(i) for i in range(hdr.counts_len)]
    assert lowest.tolist() == expected_lowest
    assert highest.tolist() == [hdr.get_highest_equivalent_value(v) for v in expected_lowest]
    assert counts.tolist() == [1] * hdr.counts_len


def _one_by_one(stamps: list[int]) -> LatencyHistogram:
    h = LatencyHistogram()
    for a, b in zip(stamps, stamps[1:]):
        h.record_ns(b - a)
    return h


def _same(a: LatencyHistogram, b: LatencyHistogram) -> bool:
    ca, cb = (np.ctypeslib.as_array(h.hdr.counts) for h in (a, b))
    return bool((ca == cb).all()) and (
        a.hdr.total_count,
        a.hdr.min_value,
        a.hdr.max_value,
        a.over_range,
    ) == (b.hdr.total_count, b.hdr.min_value, b.hdr.max_value, b.over_range)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(0, 2_000),  # sub-µs and bucket edges at the bottom
            st.integers(900_000, 1_100_000),  # a decode step's gap
            st.integers(0, 10**10),
            st.integers(3_599_000_000_000, 4 * 10**12),  # at and past the top: clamped
        ),
        min_size=0,
        max_size=80,
    )
)
@PATHS
def test_a_streams_gaps_at_once_equal_them_one_by_one(fast, steps):
    """Stamps (ns) from the gaps drawn, short streams and long: the numpy pass records each gap
    in the same bucket as ``record_ns``, with the same count, minimum, maximum and clamps."""
    stamps = list(itertools.accumulate([10**9, *steps]))
    at_once = LatencyHistogram()
    with _path(fast):
        at_once.record_gaps_ns(stamps)
    assert _same(at_once, _one_by_one(stamps))


def test_gaps_out_of_order_are_refused_either_way():
    for n in (5, 50):  # the loop's path and numpy's
        stamps = list(range(0, n * 1000, 1000))
        stamps[3] = -1
        with pytest.raises(ValueError, match="negative latency"):
            LatencyHistogram().record_gaps_ns(stamps)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=10_000_000), min_size=1, max_size=300))
@PATHS
def test_a_digest_is_the_percentiles_the_mean_and_the_bucket_counts_in_one_pass(fast, values):
    """``digest`` (a metrics endpoint's one pass) gives hdrh's own percentiles, the mean's sum,
    and at each bound the count of values whose bucket's highest equivalent value is under it."""
    h = LatencyHistogram()
    for v in values:
        h.record_us(v)
    bounds = [500, 1_000, 20_000, 1_000_000, 9_000_000]
    ps = [50, 90, 99, 99.9]
    with _path(fast):
        under, sum_us, quantiles = h.digest(bounds, ps)
    assert quantiles == [h.hdr.get_value_at_percentile(p) / 1000.0 for p in ps]
    assert sum_us == pytest.approx(h.hdr.get_mean_value() * len(values), rel=1e-12)
    highest = [h.hdr.get_highest_equivalent_value(v) for v in values]
    assert under == [sum(1 for x in highest if x <= b) for b in bounds]


def test_the_installed_hdrh_is_laid_out_as_the_fast_paths_read_it():
    """Where this fails, hdrh changed: loadtest's figures stay right (through hdrh's API), but
    recording a stream costs 2-10 times as much (bench/histogram_writes.py)."""
    assert histogram.FAST


@pytest.mark.parametrize(
    "broken",
    [
        # bucket arithmetic that is not hdrh's: a value's bucket read back one too low
        ("_bucket_values", lambda hdr, index: (np.maximum(index - 1, 0), np.ones_like(index))),
        ("_counts_view", lambda hdr: hdr.no_such_field),  # fields hdrh no longer has
    ],
    ids=["arithmetic", "fields"],
)
def test_an_hdrh_laid_out_otherwise_is_found_at_import_and_its_api_used(monkeypatch, broken):
    monkeypatch.setattr(histogram, *broken)
    assert histogram._layout_as_read() is False
