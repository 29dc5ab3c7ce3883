"""docs/measurement.md properties 1-7, on the simulated backend and the virtual clock."""

from __future__ import annotations

import mpmath
import pytest

from loadtest.core.histogram import LatencyHistogram


def sim(**kw):
    return {
        "kind": "sim",
        "max_concurrency": 1,
        "prefill_ms_per_token": 0.0,
        "decode_ms_per_token": 0.0,
        **kw,
    }


# -- 1. no coordinated omission -------------------------------------------------------------------


def test_a_two_second_stall_shows_in_p99(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "stall",
            "backend": sim(prefill_ms_per_token=10.0, stalls=[{"at": "10s", "for": "2s"}]),
            "workload": {"input_tokens": 1, "output_tokens": 1},
            "load": {"arrival": {"kind": "constant", "rate": 10}, "duration": "30s"},
        }
    )
    e2e = m["latency_ms"]["e2e"]
    assert e2e["count"] == 300
    # The request due at 10.0 s waits out the stall: done at 12.01 s; the one due at 10.1 s is
    # served next (12.02 s), and so on. p99 is the 297th of 300 values, the 4th largest: 1.74 s.
    assert e2e["max"] == pytest.approx(2010, rel=1e-3)
    assert e2e["p99"] == pytest.approx(1740, rel=1e-3)
    assert e2e["p50"] == pytest.approx(10, rel=1e-2)


def test_closed_loop_hides_what_open_loop_shows(run_virtual_fn):
    """The same stall seen by one closed-loop user: one slow request, the p99 stays low."""
    m = run_virtual_fn(
        {
            "name": "stall-closed",
            "backend": sim(prefill_ms_per_token=10.0, stalls=[{"at": "10s", "for": "2s"}]),
            "workload": {"input_tokens": 1, "output_tokens": 1},
            "load": {
                "arrival": {"kind": "concurrency", "users": 1, "think_time": "90ms"},
                "duration": "30s",
            },
        }
    )
    assert m["latency_ms"]["e2e"]["p99"] < 100  # only one of ~290 requests saw the stall


# -- 2. agrees with queueing theory (M/D/1) --------------------------------------------------------


def md1_sojourn_cdf(s: float, lam: float, d: float) -> mpmath.mpf:
    """P(sojourn <= s) for M/D/1: waiting-time formula (Erlang/Crommelin) shifted by the service d."""
    mpmath.mp.dps = 60
    t = mpmath.mpf(s) - d
    if t < 0:
        return mpmath.mpf(0)
    rho = lam * d
    total = mpmath.mpf(0)
    for k in range(int(mpmath.floor(t / d)) + 1):
        x = lam * (k * d - t)
        total += (x**k) / mpmath.factorial(k) * mpmath.e ** (-x)
    return (1 - rho) * total


def md1_sojourn_quantile(q: float, lam: float, d: float) -> float:
    lo, hi = d, 30 * d  # the alternating series needs more digits far out; p99 is well inside
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if md1_sojourn_cdf(mid, lam, d) < q else (lo, mid)
    return hi


def test_md1_mean_and_p99_match_theory(run_virtual_fn):
    lam, d = 70.0, 0.010  # rho = 0.7
    m = run_virtual_fn(
        {
            "name": "md1",
            "seeds": {"schedule": 42},
            "backend": sim(prefill_ms_per_token=10.0),
            "workload": {"input_tokens": 1, "output_tokens": 1},
            "load": {
                "arrival": {"kind": "poisson", "rate": lam},
                "requests": 60_000,
                "warmup_requests": 500,
            },
        }
    )
    e2e = m["latency_ms"]["e2e"]
    rho = lam * d
    mean_theory_ms = (d + rho * d / (2 * (1 - rho))) * 1000  # Pollaczek-Khinchine: 21.67 ms
    p99_theory_ms = md1_sojourn_quantile(0.99, lam, d) * 1000
    assert e2e["mean"] == pytest.approx(mean_theory_ms, rel=0.03)
    assert e2e["p99"] == pytest.approx(p99_theory_ms, rel=0.05)


# -- 3. no drift ---------------------------------------------------------------------------------


def test_noop_at_1000_per_s_for_60s_issues_exactly_60000(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "drift",
            "backend": {"kind": "noop"},
            "workload": {"input_tokens": 1, "output_tokens": 1},
            "load": {"arrival": {"kind": "constant", "rate": 1000}, "duration": "60s"},
        }
    )
    assert m["requests"]["sent"] == 60_000 and m["requests"]["completed"] == 60_000
    assert m["throughput"]["requests_per_s"] == pytest.approx(1000.0)
    assert m["latency_ms"]["dispatch_lag"]["max"] == 0.0


# -- 6. token timing is per token ------------------------------------------------------------------


def test_ttft_itl_tpot_recover_the_configured_timings(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "tokens",
            "backend": sim(max_concurrency=64, prefill_ms_per_token=0.5, decode_ms_per_token=7.0),
            "workload": {"input_tokens": 40, "output_tokens": 11},
            "load": {"arrival": {"kind": "constant", "rate": 5}, "requests": 20},
        }
    )
    lat = m["latency_ms"]
    hdr = dict(rel=1e-3)  # a reported value is its HDR bucket's edge: at most 0.1% off
    assert lat["ttft"]["min"] == pytest.approx(20.0, **hdr) and lat["ttft"]["max"] == pytest.approx(
        20.0, **hdr
    )
    assert lat["itl"]["count"] == 20 * 10  # n tokens -> n-1 gaps
    assert lat["itl"]["min"] == pytest.approx(7.0, **hdr) and lat["itl"]["max"] == pytest.approx(
        7.0, **hdr
    )
    assert lat["tpot"]["p50"] == pytest.approx(7.0, **hdr)
    assert lat["e2e"]["p50"] == pytest.approx(90.0, **hdr)  # 20 + 10 x 7
    assert m["requests"]["output_tokens"] == 20 * 11


def test_multi_token_event_yields_one_stamp_per_token(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "noop",
            "backend": {"kind": "noop"},
            "workload": {"input_tokens": 3, "output_tokens": 5},
            "load": {"arrival": {"kind": "burst"}, "requests": 4},
        }
    )
    assert m["latency_ms"]["itl"]["count"] == 4 * 4
    assert m["requests"]["output_tokens"] == 20


# -- 7. warmup, measurement, drain --------------------------------------------------------------------


def test_warmup_is_excluded_and_counted(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "warm",
            "backend": sim(max_concurrency=8, prefill_ms_per_token=1.0),
            "workload": {"input_tokens": 10, "output_tokens": 1},
            "load": {"arrival": {"kind": "constant", "rate": 10}, "duration": "5s", "warmup": "2s"},
        }
    )
    assert m["requests"]["warmup"] == 20 and m["requests"]["completed"] == 50
    assert m["latency_ms"]["e2e"]["count"] == 50
    assert m["window"]["start_s"] == 2.0 and m["window"]["length_s"] == 5.0


def test_requests_still_running_at_the_drain_deadline_are_failures(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "drain",
            "backend": sim(prefill_ms_per_token=1000.0),  # 1 s per request, one slot
            "workload": {"input_tokens": 1, "output_tokens": 1},
            "load": {"arrival": {"kind": "burst"}, "requests": 10, "drain_timeout": "3.5s"},
        }
    )
    # All ten sent at t0; one finishes each second; the drain deadline at 3.5 s cuts the rest.
    assert m["requests"]["completed"] == 3
    assert m["requests"]["errors_by_type"] == {"DrainTimeout": 7}


def test_request_timeout_fails_the_request_and_the_run_goes_on(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "timeout",
            "backend": sim(max_concurrency=1, prefill_ms_per_token=300.0),
            "workload": {"input_tokens": 1, "output_tokens": 1},
            "load": {
                "arrival": {"kind": "constant", "rate": 2},
                "requests": 6,
                "request_timeout": "1s",
            },
        }
    )
    r = m["requests"]
    assert r["completed"] + r["failed"] == 6 and r["completed"] >= 3
    assert set(r["errors_by_type"]) <= {"Timeout"}


def test_backend_failures_are_counted_by_type_and_the_run_goes_on(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "fail",
            "backend": sim(max_concurrency=4, prefill_ms_per_token=1.0, fail_every=5),
            "workload": {"input_tokens": 1, "output_tokens": 2},
            "load": {"arrival": {"kind": "constant", "rate": 20}, "requests": 100},
        }
    )
    assert m["requests"]["failed"] == 20 and m["requests"]["errors_by_type"] == {
        "SimulatedFailure": 20
    }
    assert m["requests"]["completed"] == 80 and m["status"] == "ok"


def test_throughput_counts_only_tokens_inside_the_window(run_virtual_fn):
    # One slot, 10 ms per token, 100 tokens a request back to back: exactly 100 tok/s.
    m = run_virtual_fn(
        {
            "name": "tput",
            "backend": sim(decode_ms_per_token=10.0),
            "workload": {"input_tokens": 1, "output_tokens": 100},
            "load": {
                "arrival": {"kind": "concurrency", "users": 1},
                "duration": "10s",
                "warmup": "2s",
            },
        }
    )
    assert m["throughput"]["output_tokens_per_s"] == pytest.approx(100.0, rel=0.011)
    assert m["window"]["length_s"] == 10.0


def test_saved_histograms_reproduce_the_reported_percentiles(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "hist",
            "backend": sim(max_concurrency=2, prefill_ms_per_token=3.0, decode_ms_per_token=2.0),
            "workload": {
                "input_tokens": {"dist": "uniform", "min": 1, "max": 50},
                "output_tokens": 8,
            },
            "load": {"arrival": {"kind": "poisson", "rate": 30}, "duration": "20s"},
        }
    )
    for metric, encoded in m["histograms"].items():
        again = LatencyHistogram.decode(encoded, m["histograms_over_range"][metric]).summary_ms()
        assert again == m["latency_ms"][metric], metric
    # the time series' interval histograms merge to the whole-run histogram
    merged = LatencyHistogram()
    for point in m["timeseries"]["points"]:
        if "ttft" in point["histograms"]:
            merged.add(LatencyHistogram.decode(point["histograms"]["ttft"]))
    assert merged.summary_ms() == m["latency_ms"]["ttft"]


def test_closed_loop_count_window(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "closed",
            "backend": sim(max_concurrency=2, prefill_ms_per_token=10.0),
            "workload": {"input_tokens": 1, "output_tokens": 1},
            "load": {
                "arrival": {"kind": "concurrency", "users": 4, "think_time": "5ms"},
                "requests": 40,
                "warmup_requests": 8,
            },
        }
    )
    assert (
        m["requests"]["completed"] == 40
        and m["requests"]["warmup"] == 8
        and m["requests"]["sent"] == 48
    )
    # 4 users on 2 slots of 10 ms: half the users wait one service time; queue time shows it.
    assert m["latency_ms"]["queue"]["max"] >= 5.0


def test_max_rate_is_a_ceiling_and_its_hold_counts_in_latency_not_in_dispatch_lag(run_virtual_fn):
    """A token bucket on loadtest's clock: a burst of up to max_rate, then one send every
    1/max_rate s. 25 at t0 with max_rate 10: 10 at once, then 0.1 s apart (the last at 1.5 s)."""
    m = run_virtual_fn(
        {
            "name": "cap",
            "backend": {"kind": "noop"},
            "workload": {"input_tokens": 1, "output_tokens": 1},
            "telemetry": {"gpu": False},
            "load": {"arrival": {"kind": "burst"}, "requests": 25, "max_rate": 10},
        }
    )
    assert m["requests"]["completed"] == 25
    assert m["latency_ms"]["e2e"]["max"] == pytest.approx(1500, abs=1)
    assert m["latency_ms"]["e2e"]["p50"] == pytest.approx(300, abs=1)  # the 13th: 3 x 0.1 s
    assert m["latency_ms"]["dispatch_lag"]["max"] < 0.01  # the hold is the ceiling, not client lag
    assert m["status"] == "ok" and any("max_rate" in w for w in m["validity"]["warnings"])


def test_the_event_loops_busy_share_is_measured_on_real_time_and_warns_near_one_core(
    tmp_path, monkeypatch
):
    """A run on the real clock records its loop thread's CPU over real time (a few requests to
    a noop backend: well under one core); a virtual run records none (its time is not the
    CPU's); and a loop at 90% or more of its core is named in the verdict's warnings."""
    from loadtest.config.loading import load_scenario
    from loadtest.execution import runner
    from loadtest.session import run_scenario
    from tests.conftest import run_virtual_scenario, write_scenario

    data = {
        "name": "busy",
        "backend": {"kind": "noop"},
        "workload": {"input_tokens": 1, "output_tokens": 2},
        "load": {"arrival": {"kind": "constant", "rate": 50}, "requests": 10},
        "telemetry": {"gpu": False},
    }
    real = run_scenario(load_scenario(write_scenario(tmp_path, data)), tmp_path / "real").metrics
    assert 0 < real["harness"]["loop_busy"] < 0.9
    assert not any("event loop was busy" in w for w in real["validity"]["warnings"])
    virtual = run_virtual_scenario(tmp_path / "v", data)
    assert virtual["harness"]["loop_busy"] is None
    monkeypatch.setattr(runner, "busy_start", lambda clock: (0, 0))
    monkeypatch.setattr(runner, "busy_share_since", lambda start: 0.93)
    busy = run_virtual_scenario(tmp_path / "b", data)
    assert busy["harness"]["loop_busy"] == 0.93
    assert any(
        w.startswith("the event loop was busy 93% of the run") for w in busy["validity"]["warnings"]
    )


def test_advice_about_a_busy_loop_never_blames_the_client_for_a_simulated_servers_work(
    monkeypatch, tmp_path
):
    """The simulator serves in the client's own event loop: a busy loop there is partly its
    work, so the advice is to simulate less, not to add client workers; a server elsewhere
    (noop: the client's own loop alone) keeps the advice about workers."""
    from loadtest.execution import runner
    from tests.conftest import run_virtual_scenario

    monkeypatch.setattr(runner, "busy_start", lambda clock: (0, 0))
    monkeypatch.setattr(runner, "busy_share_since", lambda start: 0.98)
    said = {}
    for kind, backend in [
        ("sim", {"kind": "sim", "max_concurrency": 4}),
        ("noop", {"kind": "noop"}),
    ]:
        data = {
            "name": kind,
            "backend": backend,
            "workload": {"input_tokens": 1, "output_tokens": 2},
            "load": {"arrival": {"kind": "constant", "rate": 50}, "requests": 10},
            "telemetry": {"gpu": False},
        }
        m = run_virtual_scenario(tmp_path / kind, data)
        (said[kind],) = [w for w in m["validity"]["warnings"] if "event loop was busy" in w]
    assert "simulate less" in said["sim"] and "add workers" not in said["sim"]
    assert "add workers (load.workers)" in said["noop"]
