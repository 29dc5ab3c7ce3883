"""The flags peers' users type: `--rate inf` (a burst), `--rate` with `--concurrency` (an open
loop with a cap on what is in flight), `--requests` (no warm-up, as vLLM and AIPerf count),
`--warmup` (a duration, a count, or 0)."""

from __future__ import annotations

import pytest

from loadtest.config import quick
from loadtest.config.scenario import Scenario
from loadtest.core.errors import ScenarioError

URL = "http://127.0.0.1:1/v1"


def load(**flags) -> dict:
    return quick.scenario_from_flags(url=URL, model="m", **flags)["load"]


def test_rate_inf_is_a_burst_of_the_requests():
    assert load(rate=float("inf"), requests=100) == {"arrival": {"kind": "burst"}, "requests": 100}
    with pytest.raises(ScenarioError, match="give --requests N"):
        load(rate=float("inf"))


def test_a_rate_with_a_concurrency_is_an_open_loop_capped_in_flight():
    assert load(rate=20, concurrency=8, requests=100) == {
        "arrival": {"kind": "poisson", "rate": 20},
        "max_in_flight": 8,
        "requests": 100,
    }
    burst = load(rate=float("inf"), concurrency=8, requests=100)
    assert (burst["arrival"], burst["max_in_flight"]) == ({"kind": "burst"}, 8)
    # alone, --concurrency is a closed loop of that many users, as before
    assert load(concurrency=8, requests=100)["arrival"] == {"kind": "concurrency", "users": 8}
    Scenario.model_validate(quick.scenario_from_flags(url=URL, model="m", rate=20, concurrency=8))


def test_a_request_count_measures_that_many_with_no_warmup_unless_asked():
    assert load(rate=4, requests=100) == {
        "arrival": {"kind": "poisson", "rate": 4},
        "requests": 100,
    }
    assert load(rate=4, requests=100, warmup="10")["warmup_requests"] == 10
    with pytest.raises(ScenarioError, match="a request count"):
        load(rate=4, requests=100, warmup="5s")


def test_a_duration_window_warms_up_five_seconds_unless_told():
    assert load(rate=4)["warmup"] == "5s" and load(rate=4)["duration"] == "60s"
    assert "warmup" not in load(rate=4, warmup="0") and "warmup_requests" not in load(
        rate=4, warmup="0"
    )
    assert load(rate=4, warmup="2s")["warmup"] == "2s"
    none = load(rate=4, warmup="12")
    assert none["warmup_requests"] == 12 and "warmup" not in none
