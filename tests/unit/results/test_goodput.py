"""Goodput: per-request objectives, attainment and good requests a second (virtual clock).

The simulated server answers each request in exactly 10 ms (one slot, 10 ms a prompt token,
one token out); a constant 20 req/s never queues, so every TTFT and E2E is 10 ms.
"""

from __future__ import annotations

import pytest

from loadtest.core.clock import run_virtual
from loadtest.session import Session
from loadtest.sweep import find_max_rate
from tests.conftest import MD1_BACKEND, run_virtual_scenario, write_scenario


def scenario(goodput: dict, rate: float = 20, **backend) -> dict:
    return {
        "name": "g",
        "backend": {**MD1_BACKEND, **backend},
        "workload": {"input_tokens": 1, "output_tokens": 1},
        "load": {"arrival": {"kind": "constant", "rate": rate}, "duration": "10s"},
        "goodput": goodput,
        "telemetry": {"gpu": False},
    }


def test_every_request_meets_a_loose_objective_and_none_a_tight_one(tmp_path):
    loose = run_virtual_scenario(tmp_path / "a", scenario({"ttft": "15ms", "e2e": "15ms"}))
    tight = run_virtual_scenario(tmp_path / "b", scenario({"ttft": "5ms"}))
    g = loose["goodput"]
    assert (g["judged"], g["good"], g["attainment"]) == (200, 200, 1.0)
    assert g["good_requests_per_s"] == pytest.approx(20.0)
    assert g["slo_ms"] == {"ttft": 15.0, "e2e": 15.0}
    t = tight["goodput"]
    assert (t["good"], t["attainment"], t["good_requests_per_s"]) == (0, 0.0, 0.0)


def test_a_failed_request_is_never_good(tmp_path):
    m = run_virtual_scenario(tmp_path, scenario({"e2e": "1s"}, fail_every=4))
    g = m["goodput"]
    assert m["requests"]["failed"] == 50 and g["judged"] == 200
    assert (g["good"], g["attainment"]) == (150, 0.75)
    assert g["good_requests_per_s"] == pytest.approx(15.0)


def test_no_goodput_block_no_goodput_section(tmp_path):
    data = scenario({"ttft": "1s"})
    del data["goodput"]
    assert run_virtual_scenario(tmp_path, data)["goodput"] is None


def test_an_empty_goodput_block_is_refused():
    from pydantic import ValidationError

    from loadtest.config.objectives import Goodput

    with pytest.raises(ValidationError, match="at least one"):
        Goodput()


def test_the_max_rate_search_can_search_on_goodput(tmp_path):
    """No SLA, only "90% of requests within 30 ms end to end": on the 10 ms M/D/1 server that
    holds well below capacity and fails near it; the answer sits in between."""
    data = scenario({"e2e": "30ms"}, rate=20)
    data["load"] = {"arrival": {"kind": "poisson", "rate": 20}, "duration": "30s", "warmup": "2s"}
    path = write_scenario(tmp_path, data)

    async def go(clock):
        session = Session(clock)
        try:
            return await find_max_rate(
                path, [], tmp_path / "fmr", session, tolerance=0.1, min_goodput=0.9
            )
        finally:
            await session.close()

    doc = run_virtual(go)
    assert doc.status == "ok" and 20 <= doc.max_rate.rate < 100
    found = next(p for p in doc.points if p.params["load.arrival.rate"] == doc.max_rate.rate)
    assert found.metrics.goodput.attainment >= 0.9
    failing = next(
        p for p in doc.points if p.params["load.arrival.rate"] == doc.max_rate.first_failing_rate
    )
    assert failing.metrics.goodput.attainment < 0.9 or not failing.metrics.stability.steady
    assert all(c.goodput_rps is not None for c in doc.curve)
