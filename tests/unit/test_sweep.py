"""Sweeps on the sim backend and the virtual clock: curve shape, OOM points, find-max-rate."""

from __future__ import annotations

import pytest
import yaml

from loadtest.core.clock import run_virtual
from loadtest.session import Session
from loadtest.sweep import find_max_rate, run_sweep
from tests.conftest import MD1_BACKEND
from tests.unit.execution.test_measurement import md1_sojourn_quantile


def scenario(tmp_path, data) -> object:
    p = tmp_path / "s.yml"
    p.write_text(yaml.safe_dump(data))
    return p


def sweep(tmp_path, data, axes, **kw):
    path = scenario(tmp_path, data)

    async def go(clock):
        session = Session(clock)
        try:
            return (await run_sweep(path, [], axes, tmp_path / "sweep", session, **kw)).doc.view()
        finally:
            await session.close()

    return run_virtual(go)


BASE = {
    "name": "sw",
    "backend": {
        "kind": "sim",
        "max_concurrency": 1,
        "prefill_ms_per_token": 0,
        "decode_ms_per_token": 10,
    },
    "workload": {"input_tokens": 10, "output_tokens": 10},
    "load": {
        "arrival": {"kind": "constant", "rate": 100},
        "duration": "10s",
        "warmup": "1s",
        "drain_timeout": "2s",
    },
}


def test_concurrency_sweep_has_the_expected_shape(tmp_path):
    # Each request holds a slot 90 ms (10 tokens, 10 ms apart, first at once): capacity c/0.09 req/s.
    doc = sweep(tmp_path, BASE, {"backend.max_concurrency": [1, 2, 4, 8, 16, 32]})
    tput = {c["x"]: c["output_tokens_per_s"] for c in doc["curve"]}
    assert tput[1] < tput[2] < tput[4] < tput[8] < tput[16]  # capacity-bound: grows with slots
    assert tput[1] == pytest.approx(10 / 0.09, rel=0.02)  # one slot: 11.1 req/s x 10 tokens
    assert (
        tput[16] == pytest.approx(tput[32], rel=0.01) == pytest.approx(1000, rel=0.02)
    )  # load-bound: 100 req/s x 10
    assert (
        doc["knee"] == 16
    )  # the first point with the plateau's throughput at the service-time latency
    assert doc["frontier"][0] == 16
    assert doc["status"] == "ok"
    # 1..8 slots cannot carry 100 req/s: said, and kept out of the knee
    assert doc["knee_caveats"] == [
        "overloaded points are left out of the knee and frontier: [1, 2, 4, 8]",
        "only 2 usable point(s): too few to locate a knee",
    ]
    assert (tmp_path / "sweep" / "point-05" / "metrics.json").exists()


def test_an_oom_point_is_marked_and_the_sweep_goes_on(tmp_path):
    data = {
        **BASE,
        "backend": {**BASE["backend"], "kv_capacity_tokens": 80},
    }  # 4 requests of 20 tokens fit
    doc = sweep(tmp_path, data, {"backend.max_concurrency": [2, 4, 8, 16]})
    statuses = [p["status"] for p in doc["points"]]
    assert statuses[:2] == ["ok", "ok"] and statuses[2:] == ["oom", "oom"]
    assert "CUDA out of memory" in doc["points"][2]["reason"]
    assert doc["status"] == "partial"  # not "ok": two of its points are not


def test_a_sweep_with_no_valid_point_says_so_and_its_knee_has_caveats(tmp_path):
    data = {**BASE, "load": {**BASE["load"], "validity": {"min_completed": 100_000}}}
    doc = sweep(tmp_path, data, {"backend.max_concurrency": [16, 32]})
    assert [p["status"] for p in doc["points"]] == ["invalid", "invalid"]
    assert doc["status"] == "invalid"
    assert doc["knee_caveats"] == [
        "the knee is the range's first point: the best trade-off may lie below it",
        "invalid points are on the curve (each point's reason says why): [16, 32]",
        "only 2 usable point(s): too few to locate a knee",
    ]


def test_stop_at_oom_ends_the_sweep_cleanly(tmp_path):
    data = {**BASE, "backend": {**BASE["backend"], "kv_capacity_tokens": 80}}
    doc = sweep(tmp_path, data, {"backend.max_concurrency": [2, 4, 8, 16]}, stop_at_oom=True)
    assert [p["status"] for p in doc["points"]] == ["ok", "ok", "oom"] and doc[
        "status"
    ] == "stopped_at_oom"


def test_find_max_rate_lands_within_tolerance_of_md1_theory(tmp_path):
    d, bound_ms, tol = 0.010, 60.0, 0.05
    data = {
        "name": "md1",
        "seeds": {"schedule": 5},
        "backend": MD1_BACKEND,
        "workload": {"input_tokens": 1, "output_tokens": 1},
        "load": {
            "arrival": {"kind": "poisson", "rate": 20},
            "requests": 20_000,
            "warmup_requests": 200,
        },
        "sla": {"e2e_p99": f"{bound_ms}ms"},
    }
    path = scenario(tmp_path, data)

    async def go(clock):
        session = Session(clock)
        try:
            # max_point_s=1: no point longer than the scenario's own 20,000 requests (a rate
            # whose p99 sits on the bound stays undecided, and the bracket is kept: "narrowed")
            return await find_max_rate(
                path, [], tmp_path / "fmr", session, tolerance=tol, max_point_s=1
            )
        finally:
            await session.close()

    doc = run_virtual(go).view()
    # The analytic answer: the rate at which the M/D/1 sojourn p99 equals the bound.
    lo, hi = 1.0, 99.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if md1_sojourn_quantile(0.99, mid, d) * 1000 <= bound_ms else (lo, mid)
    analytic = lo
    found = doc["max_rate"]["rate"]
    assert doc["status"] == "ok" and doc["max_rate"]["first_failing_rate"] > found
    # within the search tolerance, plus the sampling error of a p99 from 20,000 requests
    assert abs(found - analytic) / analytic <= tol + 0.03, (found, analytic)


MD1 = {
    "name": "md1",
    "seeds": {"schedule": 5},
    "backend": MD1_BACKEND,
    "workload": {"input_tokens": 1, "output_tokens": 1},
    "load": {"arrival": {"kind": "poisson", "rate": 20}, "duration": "2s", "warmup": "1s"},
    "sla": {"e2e_p99": "60ms"},
}


def search(tmp_path, data, **kw):
    path = scenario(tmp_path, data)

    async def go(clock):
        session = Session(clock)
        try:
            return await find_max_rate(path, [], tmp_path / "fmr", session, **kw)
        finally:
            await session.close()

    doc = run_virtual(go)
    on_disk = (tmp_path / "fmr" / "sweep.json").read_text()
    assert doc.to_json().replace(" ", "").replace("\n", "") == on_disk.replace(" ", "").replace(
        "\n", ""
    )
    return doc


def test_a_point_with_too_few_samples_is_lengthened_until_the_sla_can_decide(tmp_path):
    """2 s at 20 req/s is ~40 samples; a p99 PASS at 99% confidence needs >= 459. Each point is
    lengthened by the samples its checks ask for (+25%), and the search still finds the rate."""
    doc = search(tmp_path, MD1, tolerance=0.1)
    assert doc.status == "ok" and doc.max_rate.verdict == "found"
    first = doc.points[0] if doc.points[0].params["window_s"] == 2 else None
    assert first is not None and first.metrics.sla.verdict == "INCONCLUSIVE"
    check = first.metrics.sla.checks[0]
    n, need = check.samples, check.samples_needed
    assert need == 459 and n < need
    # the rerun of the same rate got ceil(2 s * 1.25 * 459 / n)
    import math

    rerun = next(
        p
        for p in doc.points[1:]
        if p.params["load.arrival.rate"] == first.params["load.arrival.rate"]
    )
    assert rerun.params["window_s"] == math.ceil(2 * 1.25 * need / n)
    # every rate the search settled on was decided by a PASS or a FAIL
    decided = {}
    for p in doc.points:
        decided[p.params["load.arrival.rate"]] = p.metrics.sla.verdict
    assert set(decided.values()) <= {"PASS", "FAIL"}
    assert doc.max_rate.rate < doc.max_rate.first_failing_rate <= doc.max_rate.rate * 1.1


def test_a_search_that_hits_the_point_cap_ends_with_a_verdict_that_says_why(tmp_path):
    doc = search(tmp_path, MD1, max_point_s=5)
    assert doc.status == "no_verdict" and doc.max_rate.verdict == "inconclusive"
    assert "--max-point-duration" in doc.max_rate.evidence and "e2e_p99" in doc.max_rate.evidence
    assert [p.params["window_s"] for p in doc.points] == [2, 5]


def test_a_point_whose_plan_is_unusable_ends_the_search_and_sweep_json_says_so(tmp_path):
    data = {
        **MD1,
        "load": {"arrival": {"kind": "constant", "rate": 0.5}, "duration": "1s", "warmup": "1s"},
    }  # arrivals at 0 s and 2 s: none inside the 1 s window after the 1 s warmup
    doc = search(tmp_path, data)
    assert doc.status == "no_verdict" and doc.max_rate.verdict == "error"
    assert doc.points[0].status == "error" and "measured" in doc.points[0].reason
    assert "at 0.5 req/s" in doc.max_rate.evidence


def test_tied_axis_sets_both_fields():
    from loadtest.sweep import parse_axes, points_of

    axes = parse_axes(None, None, None, ["backend.max_batch_size,load.arrival.users=1,4"])
    assert points_of(axes) == [
        {"backend.max_batch_size": 1, "load.arrival.users": 1},
        {"backend.max_batch_size": 4, "load.arrival.users": 4},
    ]


def test_a_priced_sweep_costs_each_point_and_names_the_cheapest_that_meets_the_sla(tmp_path):
    """$3.60 an hour = $0.001 a second. At 20, 40 and 80 req/s x 10 tokens (one slot of 90 ms
    would carry 11.1 req/s, so 32 slots): $5, $2.50 and $1.25 per million output tokens. An SLA
    on TTFT p50 of 5 ms: every point's first token comes at once (no queue), so all pass and
    80 req/s is the cheapest; sweep.md carries the column and the sentence."""
    from loadtest.reporters.sweep_report import markdown
    from loadtest.results.model import SweepDoc

    data = {
        **BASE,
        "backend": {**BASE["backend"], "max_concurrency": 32},
        "pricing": {"usd_per_hour": 3.6},
        "sla": {"ttft_p50": "5ms"},
    }
    doc = sweep(tmp_path, data, {"load.arrival.rate": [20, 40, 80]})
    cost = {c["x"]: c["usd_per_million_output_tokens"] for c in doc["curve"]}
    assert cost == {20: pytest.approx(5.0), 40: pytest.approx(2.5), 80: pytest.approx(1.25)}
    assert {c["sla"] for c in doc["curve"]} == {"PASS"}
    assert doc["cheapest"] == {
        "x": 80,
        "usd_per_million_output_tokens": pytest.approx(1.25),
        "among": "points that meet the SLA",
    }
    md = markdown(SweepDoc.model_validate(doc))
    assert "usd_per_million_output_tokens" in md.splitlines()[4]
    assert (
        "cheapest point (points that meet the SLA): load.arrival.rate=80, $1.25 per million" in md
    )
