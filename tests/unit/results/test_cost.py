"""The cost estimate (``pricing``): hourly prices over the measured rates, per-token prices
over the measured tokens; a sweep's cheapest point that meets the SLA; the change between two
runs. Virtual clock: the simulated server answers each request in exactly 10 ms (one slot, 10
ms a prompt token), a constant 20 req/s for 10 s, so every rate below is exact."""

from __future__ import annotations

import pytest

from loadtest.analysis.cost import cost_change
from loadtest.config.loading import parse_scenario
from loadtest.core.errors import ScenarioError
from loadtest.reporters.markdown import render
from loadtest.results.model import CurvePoint, RunMetrics
from loadtest.sweep.curve import cheapest
from tests.conftest import MD1_BACKEND, run_virtual_scenario


def scenario(pricing: dict, goodput: dict | None = None) -> dict:
    return {
        "name": "priced",
        "backend": MD1_BACKEND,
        "workload": {"input_tokens": 1, "output_tokens": 4},
        "load": {"arrival": {"kind": "constant", "rate": 20}, "duration": "10s"},
        "pricing": pricing,
        **({"goodput": goodput} if goodput else {}),
        "telemetry": {"gpu": False},
    }


def test_an_hourly_price_is_spread_over_the_measured_rates(tmp_path):
    """2 GPUs at $3.60 = $7.20 an hour = $0.002 a second, over 20 req/s and 80 output tok/s
    (4 tokens a request): $25 per million output tokens, $20 per million of the 100 tok/s in
    and out, $0.0001 a request; every request good (TTFT 10 ms, within 15 ms): 20 good a
    second, $0.0001 a good request. The run's report shows it, with the price it used."""
    m = run_virtual_scenario(
        tmp_path, scenario({"usd_per_gpu_hour": 3.6, "gpus": 2}, {"ttft": "15ms"})
    )
    assert m["throughput"]["output_tokens_per_s"] == pytest.approx(80.0)
    c = m["cost"]
    assert (c["basis"], c["price_usd_per_hour"], c["gpus"]) == ("hourly", 7.2, 2)
    assert c["usd_per_million_output_tokens"] == pytest.approx(25.0)
    assert c["usd_per_million_tokens"] == pytest.approx(20.0)
    assert c["usd_per_request"] == pytest.approx(0.0001)
    assert c["usd_per_good_request"] == pytest.approx(0.0001)
    report = render(RunMetrics.model_validate(m))
    assert "## Cost (estimate)" in report
    assert "| estimate at | $7.2 an hour (2 GPUs), over the measured rates |" in report
    assert "| per million output tokens | $25 |" in report


def test_per_token_prices_price_the_measured_tokens(tmp_path):
    """200 requests of 1 token in and 4 out at $1 / $10 per million: 200 x (1 + 40) / 1e6 =
    $0.0082; over 800 output tokens $10.25 a million, over 1,000 tokens $8.20, $0.000041 a
    request; none good (ttft 10 ms over 5 ms): no cost per good request."""
    m = run_virtual_scenario(
        tmp_path,
        scenario(
            {"usd_per_million_input_tokens": 1.0, "usd_per_million_output_tokens": 10.0},
            {"ttft": "5ms"},
        ),
    )
    c = m["cost"]
    assert c["basis"] == "per_token"
    assert (c["price_usd_per_million_input_tokens"], c["price_usd_per_million_output_tokens"]) == (
        1.0,
        10.0,
    )
    assert c["usd_per_million_output_tokens"] == pytest.approx(10.25)
    assert c["usd_per_million_tokens"] == pytest.approx(8.2)
    assert c["usd_per_request"] == pytest.approx(0.000041)
    assert c["usd_per_good_request"] is None


def test_no_pricing_no_cost(tmp_path):
    data = scenario({"usd_per_hour": 1.0})
    del data["pricing"]
    assert run_virtual_scenario(tmp_path, data)["cost"] is None


@pytest.mark.parametrize(
    "pricing, says",
    [
        ({}, "give one price"),
        ({"usd_per_hour": 1.0, "usd_per_gpu_hour": 2.0, "gpus": 2}, "give one price"),
        ({"usd_per_gpu_hour": 2.0}, "usd_per_gpu_hour and gpus go together"),
        ({"usd_per_million_input_tokens": 1.0}, "needs usd_per_million_output_tokens"),
        ({"usd_per_hour": -1}, "greater than 0"),
    ],
)
def test_a_price_that_is_not_one_basis_is_refused_naming_the_field(tmp_path, pricing, says):
    import yaml

    text = yaml.safe_dump(scenario(pricing))
    with pytest.raises(ScenarioError) as e:
        parse_scenario(text, tmp_path / "s.yml", [])
    assert "pricing" in str(e.value) and says in str(e.value)


def _point(x, cost, status="ok", steady=True, sla=None) -> CurvePoint:
    return CurvePoint(
        x=x, status=status, steady=steady, usd_per_million_output_tokens=cost, sla=sla
    )


def test_the_cheapest_point_is_the_cheapest_that_meets_the_sla():
    """The cheapest point overall (8) fails the SLA, an unsteady one (16) and an invalid one
    (32) are left out: 4 is the cheapest that meets it. Without an SLA, the cheapest valid
    steady point. None priced: none."""
    curve = [
        _point(1, 9.0, sla="PASS"),
        _point(4, 3.0, sla="PASS"),
        _point(8, 2.0, sla="FAIL"),
        _point(16, 1.0, steady=False, sla="PASS"),
        _point(32, 0.5, status="invalid", sla="PASS"),
    ]
    best = cheapest(curve)
    assert best is not None
    assert (best.x, best.usd_per_million_output_tokens) == (4, 3.0)
    assert "meet the SLA" in best.among
    unjudged = cheapest([_point(1, 9.0), _point(8, 2.0), _point(16, 1.0, steady=False)])
    assert unjudged is not None and unjudged.x == 8 and "no SLA" in unjudged.among
    assert cheapest([_point(1, None)]) is None
    assert cheapest([_point(1, 9.0, sla="FAIL")]) is None


def test_the_change_in_cost_between_two_runs(tmp_path):
    """The same load at one GPU's price, then two: $12.50 -> $25 per million output tokens."""
    one = RunMetrics.model_validate(
        run_virtual_scenario(tmp_path / "a", scenario({"usd_per_gpu_hour": 3.6, "gpus": 1}))
    )
    two = RunMetrics.model_validate(
        run_virtual_scenario(tmp_path / "b", scenario({"usd_per_gpu_hour": 3.6, "gpus": 2}))
    )
    change = cost_change([one], [two])
    assert change is not None
    assert (change.a_usd_per_million_output_tokens, change.b_usd_per_million_output_tokens) == (
        pytest.approx(12.5),
        pytest.approx(25.0),
    )
    assert change.change_pct == pytest.approx(100.0)
    assert "+100.0%" in change.line()
    unpriced = one.model_copy(update={"cost": None})
    assert cost_change([unpriced], [two]) is None
