"""Baseline regression: hand-built runs with known answers, then A/A and A/B over many seeds."""

from __future__ import annotations

import itertools
import math

import pytest

from loadtest.analysis import regression
from loadtest.analysis.sla import FAIL, INCONCLUSIVE, PASS
from loadtest.core.histogram import LatencyHistogram
from loadtest.results.model import (
    IntervalPoint,
    Requests,
    RunMetrics,
    Timeseries,
    Validity,
    Window,
)


def synthetic_run(
    values_per_interval: list[list[int]], tokens_per_interval: list[int] | None = None
) -> RunMetrics:
    """A run with one point per interval (1 s), each holding these e2e values (µs)."""
    points = []
    for k, values in enumerate(values_per_interval):
        h = LatencyHistogram()
        for v in values:
            h.record_us(v)
        tokens = tokens_per_interval[k] if tokens_per_interval else 100
        points.append(
            IntervalPoint(
                index=k,
                t_s=float(k),
                completed=len(values),
                failed=0,
                output_tokens_per_s=float(tokens),
                histograms={"e2e": h.encode()} if values else {},
            )
        )
    n = len(values_per_interval)
    return RunMetrics(
        status="ok",
        name="synthetic",
        started_at="",
        scenario_file="",
        scenario={},
        environment={},
        backend={"kind": "sim"},
        requests=Requests(),
        validity=Validity(valid=True),
        timeseries=Timeseries(interval_s=1.0, points=points),
        window=Window(start_s=0.0, end_s=float(n), length_s=float(n), run_s=float(n)),
    )


def test_point_estimate_is_the_runs_own_percentile(run_virtual_fn):
    metrics = run_virtual_fn(
        {
            "name": "p",
            "backend": {"kind": "sim", "max_concurrency": 2, "decode_ms_per_token": 3},
            "workload": {
                "input_tokens": 40,
                "output_tokens": {"dist": "uniform", "min": 2, "max": 20},
            },
            "load": {"arrival": {"kind": "poisson", "rate": 30}, "duration": "20s"},
        }
    )
    sample = regression.Sample([RunMetrics.model_validate(metrics)])
    for m in ("ttft", "itl", "e2e"):
        for _pct, key in ((50, "p50"), (99, "p99"), (99.9, "p999")):
            assert (
                sample.statistic(f"{m}_p{key[1:]}", sample.identity())[0]
                == metrics["latency_ms"][m][key]
            )
    assert sample.statistic("output_tokens_per_s", sample.identity())[0] == pytest.approx(
        metrics["throughput"]["output_tokens_per_s"], rel=0.05
    )  # whole intervals only, vs the exact window


def test_identical_runs_pass_and_a_uniform_slowdown_fails():
    base = synthetic_run([[10_000 + 37 * i for i in range(50)]] * 60)
    slow = synthetic_run([[11_500 + 43 * i for i in range(50)]] * 60)  # every value 15% up
    same = regression.compare([base], [base], ("e2e_p50", "e2e_p99", "output_tokens_per_s"))
    assert [c.verdict for c in same] == [PASS, PASS, PASS]
    assert [c.ratio for c in same] == [1.0, 1.0, 1.0]
    worse = regression.compare([base], [slow], ("e2e_p50",))[0]
    # p50 is the 25th value: 10_000 + 37 * 24 = 10_888 µs and 11_500 + 43 * 24 = 12_532 µs. hdrh at
    # 3 significant figures keeps 8 µs buckets in [8192, 16384) and reports a bucket's top:
    # 10_888 -> [10_888, 10_895], 12_532 -> [12_528, 12_535].
    assert (worse.baseline, worse.candidate) == (10.895, 12.535)
    assert worse.verdict == FAIL and worse.ratio == pytest.approx(12.535 / 10.895)


def test_lower_throughput_is_a_regression():
    base = synthetic_run([[10_000]] * 60, [100] * 60)
    cand = synthetic_run([[10_000]] * 60, [80] * 60)
    c = regression.compare([base], [cand], ("output_tokens_per_s",))[0]
    assert (c.baseline, c.candidate, c.ratio, c.verdict) == (100.0, 80.0, 1.25, FAIL)
    assert c.change_pct == pytest.approx(-20.0)
    assert c.change_interval_pct == pytest.approx((-20.0, -20.0))


def test_between_run_spread_widens_the_interval():
    """Each replicate is constant inside (its own bootstrap sees no noise), but replicates differ:
    treating the pooled intervals as the only noise would call +20% certain; it is not."""
    base = [synthetic_run([[10_000] * 20] * 30)] * 3
    cand = [synthetic_run([[ms * 1000] * 20] * 30) for ms in (10, 12, 14)]
    c = regression.compare(base, cand, ("e2e_p50",), confidence=0.99)[0]
    per_run = (10.007, 12.007, 14.007)  # hdrh's 8 µs buckets report their top value
    assert c.ratio == pytest.approx(12.007 / 10.007)  # the pooled median is the middle run's
    # the between-run variance of the log figures, over 3 runs, with 2 degrees of freedom; the
    # baseline has no spread at all. Student's t at 1% one-sided, 2 dof: (2p-1)/sqrt(2p(1-p)).
    mean = sum(map(math.log, per_run)) / 3
    var = sum((math.log(x) - mean) ** 2 for x in per_run) / 2 / 3
    z = (2 * 0.99 - 1) / math.sqrt(2 * 0.99 * 0.01)
    assert c.lo == pytest.approx(c.ratio * math.exp(-z * math.sqrt(var)), rel=1e-6)
    assert c.verdict == INCONCLUSIVE


def test_empty_metric_is_inconclusive_not_an_error():
    base = synthetic_run([[]] * 30)
    c = regression.compare([base], [base], ("e2e_p99",))[0]
    assert c.verdict == INCONCLUSIVE and c.ratio is None


def test_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="not a comparable metric"):
        regression.parse_metric("ttft_p42")


# -- A/A and A/B over many seeds, on the simulated server and the virtual clock -----------------


def scenario(seed: int, slowdown: float = 1.0) -> dict:
    # 4 slots, ~90 ms per request, 26 req/s: utilisation ~0.6 (1.15x slower: ~0.68)
    return {
        "name": "ab",
        "seeds": {"schedule": seed},
        "backend": {
            "kind": "sim",
            "max_concurrency": 4,
            "prefill_ms_per_token": 0.1 * slowdown,
            "decode_ms_per_token": 5 * slowdown,
        },
        "workload": {
            "input_tokens": 100,
            "output_tokens": {"dist": "uniform", "min": 8, "max": 24},
        },
        "load": {"arrival": {"kind": "poisson", "rate": 26}, "duration": "40s", "warmup": "2s"},
    }


@pytest.fixture(scope="module")
def ab_runs(tmp_path_factory):
    from tests.conftest import run_virtual_scenario

    def run(where: str, data: dict) -> RunMetrics:
        return RunMetrics.model_validate(run_virtual_scenario(tmp_path_factory.mktemp(where), data))

    a = [run("a", scenario(100 + s)) for s in range(10)]
    b = [run("b", scenario(200 + s, 1.15)) for s in range(10)]
    return a, b


NOISY = (
    "ttft_p99",
    "e2e_p50",
    "e2e_p99",
    "output_tokens_per_s",
)  # the sim's ITL is exact: too easy


def gate_verdict(checks) -> str:
    verdicts = {c.verdict for c in checks}
    return FAIL if FAIL in verdicts else INCONCLUSIVE if INCONCLUSIVE in verdicts else PASS


@pytest.mark.slow
def test_aa_rarely_fails_and_a_15_percent_slowdown_almost_always_fails(ab_runs):
    a, b = ab_runs
    aa = [
        gate_verdict(regression.compare([a[i]], [a[j]], NOISY, seed=i * 10 + j))
        for i, j in itertools.combinations(range(len(a)), 2)
    ]
    ab = [
        gate_verdict(regression.compare([a[i]], [b[j]], NOISY, seed=i * 10 + j))
        for i, j in itertools.product(range(len(a)), range(len(b)))
    ]
    assert aa.count(FAIL) <= 0.03 * len(aa), aa  # 45 A/A pairs; nominal family-wise rate 1%
    assert ab.count(FAIL) >= 0.95 * len(ab), ab  # 100 A/B pairs
    # replicated: three runs a side
    assert gate_verdict(regression.compare(a[:3], a[3:6], NOISY)) != FAIL
    assert gate_verdict(regression.compare(a[:3], b[:3], NOISY)) == FAIL
