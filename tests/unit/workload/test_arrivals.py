import itertools
import random
import statistics

import pytest
from scipy import stats

from loadtest.core.errors import ScenarioError
from loadtest.workload.arrivals import Constant, Gamma, Poisson


def take(process, n, seed=0):
    return list(itertools.islice(process.offsets_ns(random.Random(seed)), n))


def gaps_s(offsets):
    return [(b - a) / 1e9 for a, b in zip(offsets, offsets[1:])]


def test_constant_rate_does_not_drift():
    offs = take(Constant(3.0), 3001)
    assert offs[0] == 0
    assert offs[3000] == 1000 * 1_000_000_000  # exactly 1000 s after 3000 gaps of 1/3 s


def test_poisson_gaps_are_exponential_ks():
    g = gaps_s(take(Poisson(50.0), 20_001, seed=7))
    assert stats.kstest(g, "expon", args=(0, 1 / 50.0)).pvalue > 0.01
    assert statistics.fmean(g) == pytest.approx(1 / 50, rel=0.03)


def test_poisson_is_seeded_and_seed_zero_is_a_seed():
    assert take(Poisson(10.0), 100, seed=0) == take(Poisson(10.0), 100, seed=0)
    assert take(Poisson(10.0), 100, seed=0) != take(Poisson(10.0), 100, seed=1)


def test_poisson_offsets_strictly_increase():
    offs = take(Poisson(1000.0), 10_000, seed=3)
    assert all(b > a for a, b in zip(offs, offs[1:]))


def test_gamma_has_the_configured_cv_and_rate():
    for cv in (0.5, 2.0, 4.0):
        g = gaps_s(take(Gamma(20.0, cv), 40_001, seed=11))
        mean = statistics.fmean(g)
        assert abs(mean - 1 / 20) / (1 / 20) < 0.05
        assert abs(statistics.pstdev(g) / mean - cv) / cv < 0.08


def test_a_ramps_integrated_rate_is_inverted_exactly():
    from loadtest.workload.arrivals import Ramp

    ramp = Ramp(1.0, 3.0, 2.0)  # rate 1 + t over 2 s: Λ(t) = t + t²/2, then 3 a second
    assert ramp.time_at(0.0) == 0.0
    assert ramp.time_at(1.5) == pytest.approx(1.0)  # 1 + 1/2
    assert ramp.time_at(4.0) == pytest.approx(2.0)  # the ramp's end: (1 + 3) / 2 x 2
    assert ramp.time_at(7.0) == pytest.approx(3.0)  # then 3 a second
    down = Ramp(3.0, 1.0, 2.0)  # falling: Λ(t) = 3t - t²/2
    assert down.time_at(2.5) == pytest.approx(1.0)


def test_a_ramp_sends_its_expected_count_each_second():
    """10 -> 50 req/s over 10 s: second k expects 10 + 4 (k + 1/2) = 12 + 4k requests; over 40
    seeded runs each second's mean is within 4 standard errors of it."""
    from loadtest.workload.arrivals import Ramp

    counts = [[0] * 12 for _ in range(40)]
    for seed in range(40):
        for t in Ramp(10.0, 50.0, 10.0).offsets_ns(random.Random(seed)):
            if t >= 12 * 10**9:
                break
            counts[seed][t // 10**9] += 1
    for k in range(12):
        expected = 12 + 4 * k if k < 10 else 50  # after the ramp: its end rate
        mean = statistics.fmean(c[k] for c in counts)
        assert abs(mean - expected) < 4 * (expected / 40) ** 0.5, (k, mean, expected)


def test_steps_send_each_rate_for_its_length_and_stop():
    from loadtest.workload.arrivals import Steps

    process = Steps(((5.0, 2 * 10**9), (20.0, 10**9)))
    per_step = [[], []]
    for seed in range(200):
        offsets = list(process.offsets_ns(random.Random(seed)))
        assert offsets == sorted(offsets) and offsets[-1] < 3 * 10**9  # none after the last
        per_step[0].append(sum(t < 2 * 10**9 for t in offsets))
        per_step[1].append(sum(t >= 2 * 10**9 for t in offsets))
    # 5/s for 2 s, then 20/s for 1 s: 10 and 20 expected, within 4 standard errors
    assert abs(statistics.fmean(per_step[0]) - 10) < 4 * (10 / 200) ** 0.5
    assert abs(statistics.fmean(per_step[1]) - 20) < 4 * (20 / 200) ** 0.5


def test_a_staircase_runs_to_its_last_step_without_a_duration(tmp_path):
    from tests.conftest import run_virtual_scenario

    data = {
        "name": "steps",
        "backend": {"kind": "sim", "max_concurrency": 64, "decode_ms_per_token": 1},
        "workload": {"input_tokens": 8, "output_tokens": 4},
        "load": {
            "arrival": {
                "kind": "steps",
                "steps": [{"rate": 20, "for": "2s"}, {"rate": 40, "for": "1s"}],
            },
        },
    }
    m = run_virtual_scenario(tmp_path, data)
    assert m["status"] == "ok", m["validity"]
    done = m["requests"]["completed"]
    assert 50 < done < 110 and m["requests"]["planned"] == done  # about 20 x 2 + 40 x 1
    assert m["window"]["end_s"] < 3.1  # the window ends with the last step's last request


def test_a_ramp_needs_a_window(tmp_path):

    from loadtest.config.loading import load_scenario
    from tests.conftest import write_scenario

    data = {
        "name": "ramp",
        "load": {"arrival": {"kind": "ramp", "from": 1, "to": 5, "over": "10s"}},
    }
    with pytest.raises(ScenarioError) as err:
        load_scenario(write_scenario(tmp_path, data), [])
    assert "give exactly one of duration or requests" in str(err.value)


def test_each_step_is_judged_on_its_own_and_the_knee_is_where_the_server_fell_behind(tmp_path):
    """A FIFO server of one slot, 8 prompt tokens at 0.1 ms (the first token) and 3 more tokens
    at 5 ms: 15.8 ms a request, about 63 req/s at most. Steps of 10, 20 and 80 req/s for 10 s
    each: the first two are carried, the third is not, so the knee is between 20 and 80."""
    from tests.conftest import run_virtual_scenario

    data = {
        "name": "staircase",
        "backend": {"kind": "sim", "max_concurrency": 1, "prefill_ms_per_token": 0.1,
                    "decode_ms_per_token": 5},
        "workload": {"input_tokens": 8, "output_tokens": 4},
        "load": {
            "arrival": {"kind": "steps", "steps": [
                {"rate": 10, "for": "10s"}, {"rate": 20, "for": "10s"}, {"rate": 80, "for": "10s"}]},
            "drain_timeout": "5m",
        },
    }  # fmt: skip
    m = run_virtual_scenario(tmp_path, data)
    steps = m["steps"]["steps"]
    assert [(s["index"], s["rate"], s["start_s"], s["end_s"]) for s in steps] == [
        (1, 10, 0, 10), (2, 20, 10, 20), (3, 80, 20, 30),
    ]  # fmt: skip
    assert [s["stability"]["steady"] for s in steps] == [True, True, False]
    # alone in the server, a request takes its service time: its first token after the 0.8 ms
    # prompt, its last 15 ms later (a light queue at 10 req/s adds a little at the median)
    assert 15.8 <= steps[0]["e2e_ms"]["p50"] < 20 and 0.8 <= steps[0]["ttft_ms"]["p50"] < 4
    assert steps[2]["e2e_ms"]["p50"] > 10 * steps[0]["e2e_ms"]["p50"]  # a queue that grows
    assert sum(s["requests"] for s in steps) == m["requests"]["completed"]
    knee = m["steps"]["knee"]
    assert (knee["last_steady_rate"], knee["first_unsteady_rate"], knee["step"]) == (20, 80, 3)
    assert any("delivered" in r for r in knee["reasons"])
