"""Property 18: a verdict decides where it can and is never wrong. Each check is judged
against the client's own measured share (hand-made histograms, values under 2,048 µs so hdrh
keeps them exact): PASS as observed, FAIL with the client's share taken off, INCONCLUSIVE
between, each with its cause."""

from __future__ import annotations

import pytest

from loadtest.analysis.sla import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    decide,
    error_rate_check,
    floor_check,
    percentile_check,
    samples_needed,
)
from loadtest.core import exit_codes
from loadtest.core.histogram import LatencyHistogram
from loadtest.results.runset import ClientShare


def hist(*runs: tuple[int, int]) -> LatencyHistogram:
    """``(count, value µs)`` runs as one histogram."""
    h = LatencyHistogram()
    for count, value in runs:
        for _ in range(count):
            h.record_us(value)
    return h


def ttft_check(observed_us: int, service_us: int, bound_ms: float, n: int = 600):
    hists = {"ttft": hist((n, observed_us)), "ttft_service": hist((n, service_us))}
    return percentile_check(
        "ttft_p99", hists["ttft"], 99, bound_ms, 0.99, hists, ClientShare(0.5, 0.0), "ttft"
    )


def test_a_late_client_cannot_make_a_pass_fail():
    # observed 1.5 ms (every send 0.5 ms late); from the actual send, 1.0 ms: the limit 1.2 ms
    # lies between, so the client's lateness decides, and the check says so
    c = ttft_check(1500, 1000, 1.2)
    assert (c.verdict, c.undecided) == (INCONCLUSIVE, "client")
    assert (c.observed, c.client_free) == (1.5, 1.0) and c.client_could_change
    assert "observed 1.5 ms, limit 1.2 ms" in c.reason and "spans the limit" in c.reason


def test_a_figure_that_fails_without_the_client_fails():
    c = ttft_check(1500, 1300, 1.2)
    assert (c.verdict, c.observed, c.client_free) == (FAIL, 1.5, 1.3)
    assert not c.client_could_change and c.undecided is None
    assert "over the limit, and 1.3 ms with the client's own lateness taken off" in c.reason


def test_a_figure_that_passes_as_observed_passes_however_late_the_client():
    c = ttft_check(1000, 400, 1.2)
    assert (c.verdict, c.client_free) == (PASS, 0.4)
    assert "0 of 600 samples over, so p99 <= limit at 99% confidence" in c.reason


def test_itl_moves_either_way_by_the_stamp_delay():
    # 600 gaps of 1.0 ms, stamps up to 0.3 ms late: the true p99 lies in 0.7 .. 1.3 ms
    itl = hist((600, 1000))
    share = ClientShare(dispatch_max_ms=5.0, stamp_delay_ms=0.3)  # a send's lateness: no part

    def check(bound: float):
        return percentile_check("itl_p99", itl, 99, bound, 0.99, {"itl": itl}, share, "itl")

    assert (check(1.5).verdict, check(1.5).client_free) == (PASS, 0.7)
    assert (check(1.2).verdict, check(1.2).undecided) == (INCONCLUSIVE, "client")
    assert check(0.6).verdict == FAIL


def test_a_figure_with_no_twin_takes_off_the_latest_send():
    # queue time 1.5 ms, the latest send 0.4 ms late, no stamp delay: 1.1 ms at best
    queue = hist((600, 1500))
    share = ClientShare(dispatch_max_ms=0.4)

    def check(bound: float):
        return percentile_check("queue_p99", queue, 99, bound, 0.99, {}, share, "queue")

    assert check(1.2).verdict == INCONCLUSIVE and check(1.2).client_free == pytest.approx(1.1)
    assert check(1.0).verdict == FAIL


def test_a_wait_the_scenario_set_is_the_figures_own_not_the_clients():
    # TTFT 1.5 ms of which 1.0 ms was the wait for an in-flight slot (load.max_in_flight):
    # from the actual send 0.5 ms, but the wait is no lateness of the client's, so only the
    # latest send's own lateness (0.1 ms) comes off: 1.4 ms fails a 1.2 ms limit
    hists = {"ttft": hist((600, 1500)), "ttft_service": hist((600, 500))}
    held = ClientShare(dispatch_max_ms=0.1, held=True)
    c = percentile_check("ttft_p99", hists["ttft"], 99, 1.2, 0.99, hists, held, "ttft")
    assert (c.verdict, c.client_free) == (FAIL, pytest.approx(1.4))
    free = percentile_check(
        "ttft_p99", hists["ttft"], 99, 1.2, 0.99, hists, ClientShare(0.1), "ttft"
    )
    # not held: the twin would take the wait off as if it were the client's lateness
    assert (free.verdict, free.client_free) == (INCONCLUSIVE, 0.5)


def test_samples_over_the_limit_that_are_the_clients_say_so():
    # p99 within the limit as observed, 6 of 600 over it: too many for 99% confidence; from the
    # actual send none is over: the client's lateness decides whether the evidence suffices
    hists = {"ttft": hist((594, 1000), (6, 1500)), "ttft_service": hist((600, 1000))}
    c = percentile_check(
        "ttft_p99", hists["ttft"], 99, 1.2, 0.99, hists, ClientShare(0.5, 0.0), "ttft"
    )
    assert (c.verdict, c.undecided) == (INCONCLUSIVE, "client")
    assert c.samples_needed == samples_needed(6, 0.01, 0.99)


def test_too_few_samples_say_how_many():
    c = ttft_check(1000, 1000, 1.2, n=100)
    assert (c.verdict, c.undecided, c.samples_needed) == (INCONCLUSIVE, "samples", 459)
    assert "too few to claim p99 at 99% confidence (needs >= 459 samples)" in c.reason


def test_the_clients_own_failures_are_the_servers_only_as_observed():
    # 10 of 100 failed, 8 of them because the client ran out of descriptors: 2 of 92 the
    # server's, under 5%
    c = error_rate_check(10, 100, 0.05, 0.99, client_failed=8)
    assert (c.verdict, c.undecided) == (INCONCLUSIVE, "client")
    assert c.client_free == pytest.approx(2 / 92)
    assert error_rate_check(10, 100, 0.05, 0.99, client_failed=2).verdict == FAIL


def test_a_throughput_floor_counts_the_window_a_late_schedule_cost():
    # 95 tok/s against a floor of 100: a schedule 10% of the window late could explain it
    # (95 / 0.9 = 105.6), 1% could not (95.96)
    late = floor_check("output_tokens_per_s", 95.0, 100.0, "output tok/s", lost_share=0.1)
    assert (late.verdict, late.undecided) == (INCONCLUSIVE, "client")
    assert late.client_free == pytest.approx(95 / 0.9)
    assert floor_check("output_tokens_per_s", 95.0, 100.0, "tok/s", 0.01).verdict == FAIL


def test_an_invalid_run_passes_only_where_the_client_was_all_that_was_wrong():
    passed = [ttft_check(1000, 400, 1.2)]
    ok = decide(passed, "ok")
    assert (ok.verdict, ok.reasons) == (PASS, [])
    late = decide(passed, "invalid", ["dispatch lag p99 6 ms > 5 ms"], client_lateness_only=True)
    assert late.verdict == PASS and "only for the client's own lateness" in late.reasons[0]
    lost = decide(passed, "invalid", ["worker 1 of 2: lost"], client_lateness_only=False)
    assert lost.verdict == INCONCLUSIVE
    assert "every check passed, but no PASS can rest on a run that is invalid" in lost.reasons[0]
    stopped = decide(passed, "interrupted", ["stopped by SIGINT"])
    assert stopped.verdict == INCONCLUSIVE and "interrupted" in stopped.reasons[0]
    failing = decide([ttft_check(1500, 1300, 1.2)], "invalid", ["worker 1 of 2: lost"])
    assert failing.verdict == FAIL and failing.reasons[0].startswith("ttft_p99 failed:")


@pytest.mark.parametrize(
    "status, verdict, code",
    [
        ("interrupted", "FAIL", 130),
        ("failed", "FAIL", exit_codes.FAILED),
        ("failed", None, exit_codes.FAILED),
        ("invalid", "FAIL", exit_codes.SLA_FAILED),
        ("ok", "FAIL", exit_codes.SLA_FAILED),
        ("invalid", "PASS", exit_codes.OK),  # PASS on an invalid run: client lateness only
        ("ok", "INCONCLUSIVE", exit_codes.INVALID),
        ("invalid", None, exit_codes.INVALID),
        ("ok", None, exit_codes.OK),
    ],
)
def test_one_exit_code_precedence(status, verdict, code):
    assert exit_codes.for_result(status, verdict) == code


def test_a_gate_on_an_interrupted_run_is_not_itself_interrupted():
    assert exit_codes.for_gate("interrupted", "INCONCLUSIVE") == exit_codes.INVALID
    assert exit_codes.for_gate("interrupted", "FAIL") == exit_codes.SLA_FAILED
    assert exit_codes.for_gate("failed", "FAIL") == exit_codes.FAILED


def test_each_end_is_the_tightest_bound_over_the_loops_lag_ranks():
    """Where 90% of stamps waited 10 µs, 9% 200 µs and 1% 1 ms, a gap's median moves by 10 µs
    at most (2 x 10% of gaps may hold a later stamp: the 30th..70th percentiles, less or plus
    10 µs), not by the largest delay; its p99 may be as high as the largest gap plus 10 µs."""
    from loadtest.analysis.figure_ends import ends

    itl = hist((594, 1000), (6, 1900))
    lag = hist((540, 10), (54, 200), (6, 1000))
    share = ClientShare(stamp_delay_ms=0.2, lag=lag)
    assert share.delays() == [
        (50.0, 0.01),
        (10.0, 0.01),
        (1.0, 0.2),
        (pytest.approx(0.1), 1.0),
        (0.0, 1.0),
    ]
    median = ends("itl", 50, {"itl": itl}, share)
    assert (median.lo, median.hi) == (pytest.approx(0.99), pytest.approx(1.01))
    tail = ends("itl", 99, {"itl": itl}, share)
    assert (tail.lo, tail.hi) == (pytest.approx(0.99), pytest.approx(1.91))
    # TTFT from its twin: one stamp, so f per cent of samples, not 2f
    ttft = {"ttft": hist((600, 1500)), "ttft_service": hist((600, 1200))}
    first = ends("ttft", 99, ttft, share)
    assert (first.lo, first.hi) == (pytest.approx(1.19), 1.5)
