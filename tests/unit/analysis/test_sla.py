"""Property 8 (enough evidence) and the three-valued verdicts."""

from loadtest.analysis.sla import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    binom_cdf,
    error_rate_check,
    overall,
    percentile_check,
    samples_needed,
)
from loadtest.core.histogram import LatencyHistogram


def hist(values_us):
    h = LatencyHistogram()
    for v in values_us:
        h.record_us(v)
    return h


def test_a_p99_bound_needs_459_clean_samples():
    assert samples_needed(0, 0.01, 0.99) == 459
    assert percentile_check("ttft_p99", hist([1000] * 458), 99, 5.0, 0.99).verdict == INCONCLUSIVE
    assert percentile_check("ttft_p99", hist([1000] * 459), 99, 5.0, 0.99).verdict == PASS


def test_few_samples_say_inconclusive_with_how_many_are_needed():
    c = percentile_check("ttft_p99", hist([1000] * 50), 99, 5.0, 0.99)
    assert c.verdict == INCONCLUSIVE and "needs >= 459" in c.reason


def test_observed_percentile_over_the_bound_fails():
    c = percentile_check("ttft_p99", hist([1000] * 900 + [9000] * 100), 99, 5.0, 0.99)
    assert c.verdict == FAIL and c.observed > 5.0


def test_some_misses_need_more_samples():
    # 1000 samples, 2 over the bound: P(X <= 2 | n=1000, p=0.01) = 0.0027 <= 0.01: PASS
    values = [1000] * 998 + [9000] * 2
    assert percentile_check("ttft_p99", hist(values), 99, 5.0, 0.99).verdict == PASS
    # 500 samples, 3 over: the observed p99 is within the bound, the evidence is not enough
    values = [1000] * 497 + [9000] * 3
    assert percentile_check("ttft_p99", hist(values), 99, 5.0, 0.99).verdict == INCONCLUSIVE


def test_binomial_cdf_by_hand():
    assert abs(binom_cdf(0, 3, 0.5) - 0.125) < 1e-12
    assert abs(binom_cdf(1, 3, 0.5) - 0.5) < 1e-12


def test_error_rate_verdicts():
    assert error_rate_check(0, 1000, 0.01, 0.99).verdict == PASS
    assert error_rate_check(0, 100, 0.01, 0.99).verdict == INCONCLUSIVE
    assert error_rate_check(5, 100, 0.01, 0.99).verdict == FAIL


def test_overall_is_three_valued_and_invalid_runs_never_pass():
    p = percentile_check("x", hist([1] * 1000), 99, 5.0, 0.99)
    assert overall([p], "ok") == PASS
    assert overall([p], "invalid") == INCONCLUSIVE
    assert overall([p, error_rate_check(5, 100, 0.01, 0.99)], "ok") == FAIL


def test_every_sla_key_becomes_a_check(run_virtual_fn):
    """Regression: e2e_* keys were once skipped (a regex without digits), and no check meant PASS."""
    m = run_virtual_fn(
        {
            "name": "all",
            "backend": {"kind": "sim", "max_concurrency": 1, "prefill_ms_per_token": 10.0},
            "workload": {"input_tokens": 1, "output_tokens": 2},
            "load": {"arrival": {"kind": "constant", "rate": 10}, "requests": 50},
            "sla": {
                "e2e_p99": "1ms",
                "e2e_service_p50": "1s",
                "ttft_p90": "1s",
                "itl_p50": "1s",
                "tpot_p50": "1s",
                "queue_p50": "1s",
                "ttft_service_p50": "1s",
                "error_rate": 0.5,
                "output_tokens_per_s": 1,
                "requests_per_s": 1,
            },
        }
    )
    names = [c["name"] for c in m["sla"]["checks"]]
    assert len(names) == 10 and "e2e_p99" in names
    assert m["sla"]["verdict"] == FAIL  # e2e is ~15 ms > 1 ms
