"""The scenario models on their own: units parsed to integer nanoseconds and requests a second,
defaults filled, planned counts estimated, and bad values refused with the field named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from loadtest.config.scenario import Scenario


def scenario(**load) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "s",
            "backend": {"kind": "sim"},
            "load": {"arrival": {"kind": "poisson", "rate": 20}, **load},
        }
    )


def test_durations_and_rates_are_parsed_to_their_units():
    s = Scenario.model_validate(
        {
            "name": "s",
            "backend": {"kind": "sim"},
            "load": {
                "arrival": {"kind": "poisson", "rate": "120/m"},
                "duration": "2m",
                "warmup": "500ms",
            },
        }
    )
    assert s.load.arrival.rate == 2.0  # 120 a minute
    assert s.load.duration == 120_000_000_000
    assert s.load.warmup == 500_000_000
    assert s.load.drain_timeout == 60_000_000_000  # the default, 60s


def test_the_planned_count_is_rate_times_window_and_warmup():
    # 20 req/s over 30 s measured + 5 s warm-up: 700 requests
    assert scenario(duration="30s", warmup="5s").load.planned_estimate() == pytest.approx(700)
    # by count: 100 measured + 10 warm-up
    assert scenario(requests=100, warmup_requests=10).load.planned_estimate() == 110


@pytest.mark.parametrize(
    ("load", "field"),
    [
        ({"duration": "soon"}, "duration"),
        ({"duration": "10s", "requests": 0}, "requests"),
        ({"duration": "10s", "workers": 0}, "workers"),
        ({"duration": "10s", "surprise": 1}, "surprise"),  # a misspelt field is an error
    ],
)
def test_a_bad_value_is_refused_with_its_field(load, field):
    with pytest.raises(ValidationError) as err:
        scenario(**load)
    assert any(field in ".".join(map(str, e["loc"])) for e in err.value.errors())


def test_the_backend_is_chosen_by_kind_and_keeps_its_own_fields():
    s = Scenario.model_validate(
        {
            "name": "s",
            "backend": {"kind": "openai", "base_url": "http://h:8000/v1", "model": "m"},
            "load": {"arrival": {"kind": "concurrency", "users": 4}, "requests": 8},
        }
    )
    assert s.backend.kind == "openai" and s.backend.api == "chat"  # the default API
    assert s.load.arrival.users == 4
    with pytest.raises(ValidationError):  # a field of another backend kind
        Scenario.model_validate(
            {
                "name": "s",
                "backend": {"kind": "sim", "model": "m"},
                "load": {"arrival": {"kind": "burst"}, "requests": 1},
            }
        )


def test_a_scenario_is_frozen():
    s = scenario(duration="10s")
    with pytest.raises(ValidationError):
        s.name = "other"


@pytest.mark.parametrize(
    "models, said",
    [
        ({"a": 1, " ": 1}, "a model's name is empty"),
        ({"a\x1b[2J": 1}, "printable"),
        ({"x" * 257: 1}, "at most 256"),
        ({"a": 0}, "a weight is a positive number"),
        ({f"m{i}": 1 for i in range(65)}, "name 1 to 64 models"),
    ],
)
def test_a_model_mix_refuses_names_it_could_not_send_or_show(models, said):
    with pytest.raises(ValidationError, match=said) as err:
        Scenario.model_validate(
            {
                "name": "s",
                "backend": {"kind": "sim"},
                "workload": {"models": models},
                "load": {"arrival": {"kind": "poisson", "rate": 20}, "duration": "1s"},
            }
        )
    assert err.value.errors()[0]["loc"][:2] == ("workload", "models")
