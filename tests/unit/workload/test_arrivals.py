import itertools
import random
import statistics

from scipy import stats

from loadtest.core.errors import ScenarioError
from loadtest.workload.arrivals import Constant, Gamma, Poisson, read_trace


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
    assert statistics.fmean(g) == __import__("pytest").approx(1 / 50, rel=0.03)


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


def test_trace_reads_seconds_and_jsonl(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text('# offsets\n0\n0.5\n{"offset": 1.25}\n')
    assert read_trace(p, 2.0) == (0, 1_000_000_000, 2_500_000_000)


def test_trace_rejects_going_backwards_with_the_line(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("0\n2\n1\n")
    try:
        read_trace(p, 1.0)
    except ScenarioError as exc:
        assert f"{p}:3:" in str(exc)
    else:
        raise AssertionError("expected ScenarioError")
