"""Run lengths planned to decide: what each SLA check needs, against what a plan holds."""

from __future__ import annotations

from loadtest.analysis.early_stopping import enough
from loadtest.analysis.planning import sla_needs
from loadtest.config.loading import load_scenario
from loadtest.config.objectives import Sla
from loadtest.workload.plan import check_plan
from tests.conftest import write_scenario


def planned(tmp_path, load: dict, output_tokens=11):
    path = write_scenario(
        tmp_path,
        {
            "name": "p",
            "backend": {"kind": "sim"},
            "workload": {"input_tokens": 8, "output_tokens": output_tokens},
            "load": load,
        },
    )
    return check_plan(load_scenario(path).scenario, lambda name: tmp_path / name)


def test_a_constant_rate_window_is_counted_from_the_plan(tmp_path):
    # 10 req/s for 50 s, no warm-up: 500 measured requests, 10 gaps each
    plan = planned(tmp_path, {"arrival": {"kind": "constant", "rate": 10}, "duration": "50s"})
    sla = Sla.model_validate({"ttft_p99": "1s", "itl_p99": "50ms", "error_rate": 0.01})
    ttft, itl, errors = sla_needs(sla, plan)
    assert (ttft.name, ttft.samples, ttft.clean, ttft.planned) == ("ttft_p99", "requests", 459, 500)
    assert ttft.per_s == 10.0 and ttft.decides
    # 500 samples claim a p99 with none over (P(X <= 0) = 0.99^500 = 0.0066), not with one
    # (+ 500 x 0.01 x 0.99^499 = 0.040 > 0.01)
    assert ttft.most_over == 0
    assert (itl.samples, itl.planned) == ("gaps", 5000)
    assert enough(itl.most_over, 5000, 0.01, 0.99)
    assert not enough(itl.most_over + 1, 5000, 0.01, 0.99)
    assert (errors.name, errors.clean, errors.planned) == ("error_rate", 459, 500)
    # a server within the bound still has misses: half the allowed share over needs more
    assert ttft.typical > ttft.clean and enough(ttft.typical // 200, ttft.typical, 0.01, 0.99)
    assert "decides with up to 0 over the limit" in ttft.line()


def test_a_short_window_says_how_long_one_would_decide(tmp_path):
    plan = planned(tmp_path, {"arrival": {"kind": "constant", "rate": 5}, "duration": "20s"})
    (ttft,) = sla_needs(Sla.model_validate({"ttft_p99": "1s"}), plan)
    assert ttft.planned == 100 and ttft.decides is False
    assert ttft.window_s(459) == 459 / 5
    assert "too few, INCONCLUSIVE at best: >=" in ttft.line()


def test_a_closed_loop_is_counted_by_its_server(tmp_path):
    plan = planned(tmp_path, {"arrival": {"kind": "concurrency", "users": 2}, "duration": "20s"})
    (ttft,) = sla_needs(Sla.model_validate({"ttft_p95": "1s"}), plan)
    assert ttft.planned is None and ttft.decides is None and ttft.clean == 90
    assert "set load.requests to at least that" in ttft.line()


def test_the_gate_compares_throughput_only_where_the_server_set_it():
    from loadtest.analysis.regression import DEFAULT_METRICS, default_metrics
    from loadtest.results.model import RunMetrics

    def run(kind: str) -> RunMetrics:
        return RunMetrics.model_construct(scenario={"load": {"arrival": {"kind": kind}}})

    assert default_metrics([run("concurrency"), run("burst")]) == DEFAULT_METRICS
    assert "output_tokens_per_s" not in default_metrics([run("poisson"), run("poisson")])
    assert "output_tokens_per_s" not in default_metrics([run("concurrency"), run("constant")])
