"""The stability judgement against queueing cases with known answers (virtual clock).

The simulated server here is M/D/1: one slot, 10 ms a request, capacity 100 req/s. Below
capacity the queue is stable however busy; above it the backlog grows at (rate - 100)/s and
TTFT with it, so delivered/offered -> 100/rate.
"""

from __future__ import annotations

import pytest

from loadtest.config.objectives import Sla
from loadtest.core.clock import run_virtual
from loadtest.session import Session
from loadtest.sweep import find_max_rate, run_sweep
from tests.conftest import MD1_BACKEND, run_virtual_scenario, write_scenario


def md1(rate: float, seed: int = 1, **load) -> dict:
    return {
        "name": "md1",
        "seeds": {"schedule": seed},
        "backend": MD1_BACKEND,
        "workload": {"input_tokens": 1, "output_tokens": 1},
        "load": {
            "arrival": {"kind": "poisson", "rate": rate},
            "duration": "60s",
            "warmup": "5s",
            **load,
        },
        "telemetry": {"gpu": False},
    }


@pytest.mark.parametrize("rate", [50, 80, 90])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_below_capacity_is_steady_however_busy(tmp_path, rate, seed):
    s = run_virtual_scenario(tmp_path, md1(rate, seed))["stability"]
    assert s["steady"] is True and s["reasons"] == []
    assert s["offered_rps"] == pytest.approx(rate, rel=0.05)
    assert s["delivered_fraction"] == pytest.approx(1.0, abs=0.01)
    assert s["ttft_trend"]["rising"] is False


@pytest.mark.parametrize("rate", [110, 120])
def test_above_capacity_is_overloaded_with_the_evidence(tmp_path, rate):
    m = run_virtual_scenario(tmp_path, md1(rate))
    s = m["stability"]
    assert s["steady"] is False
    # the server carries 100 req/s of the `rate` offered
    assert s["delivered_fraction"] == pytest.approx(100 / rate, abs=0.03)
    assert s["delivered_rps"] == pytest.approx(100, rel=0.03)
    # the backlog grows by what is not carried: (rate - 100) a second
    assert s["backlog_growth_per_s"] == pytest.approx(rate - 100, rel=0.2)
    assert s["ttft_trend"]["rising"] and s["ttft_trend"]["slope_lo"] > 0
    assert any("delivered" in r for r in s["reasons"]) and any(
        "TTFT rose" in r for r in s["reasons"]
    )
    assert m["status"] == "ok"  # the measurement is sound; the system was overloaded
    assert m["validity"]["warnings"][0].startswith("overloaded:")


def test_a_closed_loop_is_judged_on_its_trend_only(tmp_path):
    data = md1(1)
    data["load"] = {
        "arrival": {"kind": "concurrency", "users": 4},
        "duration": "30s",
        "warmup": "2s",
    }
    s = run_virtual_scenario(tmp_path, data)["stability"]
    assert s["steady"] is True and s["open_loop"] is False and s["offered_rps"] is None


def test_a_latency_check_on_an_overloaded_run_never_passes(tmp_path):
    """A bound every request meets (1 h) still cannot PASS a run whose latency grows with its
    length; the same bound on a steady run passes."""
    sla = {"e2e_p99": "1h", "error_rate": 0.5}
    over = run_virtual_scenario(tmp_path / "over", {**md1(120), "sla": sla})["sla"]
    fine = run_virtual_scenario(tmp_path / "fine", {**md1(50), "sla": sla})["sla"]
    e2e_over = next(c for c in over["checks"] if c["name"] == "e2e_p99")
    assert e2e_over["verdict"] == "INCONCLUSIVE" and "overloaded" in e2e_over["reason"]
    assert over["verdict"] == "INCONCLUSIVE"
    assert next(c for c in over["checks"] if c["name"] == "error_rate")["verdict"] == "PASS"
    assert fine["verdict"] == "PASS"
    assert Sla.model_validate(sla).latency_bounds()  # the bound under test is a latency bound


def test_sweeps_mark_overloaded_points_and_keep_them_off_the_knee_and_frontier(tmp_path):
    path = write_scenario(tmp_path, md1(50, duration="30s"))

    async def go(clock):
        session = Session(clock)
        try:
            axes = {"load.arrival.rate": [50, 90, 150]}
            return (await run_sweep(path, [], axes, tmp_path / "sweep", session)).doc
        finally:
            await session.close()

    doc = run_virtual(go)
    assert [c.steady for c in doc.curve] == [True, True, False]
    # 150 req/s delivers the most (100 req/s) but its p99 is a growing backlog's: not a candidate
    assert doc.knee in (50, 90) and 150 not in doc.frontier


def test_the_max_rate_search_treats_an_overloaded_point_as_over_the_limit(tmp_path):
    """With a bound any stable run meets, only stability stops the search: the answer lands just
    under the server's capacity (100 req/s), never above it."""
    path = write_scenario(tmp_path, {**md1(40, duration="20s"), "sla": {"e2e_p99": "1h"}})

    async def go(clock):
        session = Session(clock)
        try:
            return await find_max_rate(path, [], tmp_path / "fmr", session, tolerance=0.1)
        finally:
            await session.close()

    doc = run_virtual(go)
    assert doc.status == "ok"
    assert 80 <= doc.max_rate.rate < 100 <= doc.max_rate.first_failing_rate * 1.1
    overloaded = [p for p in doc.points if p.metrics and not p.metrics.stability.steady]
    assert overloaded and all(p.params["load.arrival.rate"] >= 95 for p in overloaded)


# --- three values, from hand-built timelines (no run) -----------------------------------------

S = 1_000_000_000


def timeline(pre: int, arrived: int, delivered_of_arrived: int, window_s: int = 10):
    """``pre`` requests intended before the window, all done in its first second; ``arrived``
    due evenly in the window, the first ``delivered_of_arrived`` done in it, the rest after."""
    from loadtest.execution.timeline import Timeline

    tl = Timeline()
    for i in range(pre):
        tl.add(-S, None, None, S // 2 + i, True)
    for i in range(arrived):
        t = i * window_s * S // arrived
        done = t + 1000 if i < delivered_of_arrived else (window_s + 1) * S
        tl.add(t, None, None, done, True)
    return tl


def test_a_shortfall_within_the_backlogs_noise_is_unknown_not_steady():
    from loadtest.results.stability import judge

    # the point: 17 arrivals, 9 delivered (53%), the backlog 3 -> 11. A stable queue
    # of that size wanders by 3 * sqrt(12) = 10.4, so growth 8 proves nothing either way
    s = judge(timeline(3, 17, 6), 0, 10 * S, S, open_loop=True)
    assert (s.backlog_at_start, s.backlog_at_end) == (3, 11)
    assert s.delivered_fraction == pytest.approx(9 / 17)
    assert s.steady is None
    assert "too few requests (17 in the window) to tell a shortfall from noise" in s.reasons[0]


def test_a_shortfall_beyond_the_noise_is_overloaded_and_a_carried_load_steady():
    from loadtest.results.stability import judge

    over = judge(timeline(3, 170, 87), 0, 10 * S, S, open_loop=True)  # 90 of 170, 3 -> 83
    assert over.steady is False and over.backlog_at_end == 83
    carried = judge(timeline(0, 170, 170), 0, 10 * S, S, open_loop=True)
    assert carried.steady is True and carried.reasons == []


def test_a_closed_loop_with_too_few_intervals_is_unknown():
    from loadtest.results.stability import judge

    s = judge(timeline(0, 5, 5), 0, 10 * S, S, open_loop=False)  # no first tokens: no trend
    assert s.steady is None and "too few to judge the latency trend" in s.reasons[0]


def test_an_sla_pass_on_a_run_that_may_be_overloaded_is_inconclusive():
    from loadtest.analysis.sla import evaluate
    from loadtest.core.histogram import LatencyHistogram
    from loadtest.results.runset import Evidence

    ttft = LatencyHistogram()
    for _ in range(600):
        ttft.record_us(1000)
    sla = Sla.model_validate({"ttft_p99": "2ms"})

    def verdict(steady, short):
        ev = Evidence("ok", [], {"ttft": ttft}, steady=steady, short_delivery=short)
        return evaluate(sla, ev).checks[0]

    assert verdict(True, False).verdict == "PASS"
    assert verdict(None, False).verdict == "PASS"  # unknown for want of intervals only
    unknown_short = verdict(None, True)
    assert (unknown_short.verdict, unknown_short.undecided) == ("INCONCLUSIVE", "unsteady")
    assert "stability unknown" in unknown_short.reason
    assert verdict(False, True).undecided == "unsteady"
