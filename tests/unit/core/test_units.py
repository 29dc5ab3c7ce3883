import pytest

from loadtest.core.units import format_duration_ns, parse_duration_ns, parse_rate_per_s


@pytest.mark.parametrize(
    "text,ns",
    [
        ("500ms", 500_000_000),
        ("30s", 30_000_000_000),
        ("2m", 120_000_000_000),
        ("1.5", 1_500_000_000),
        (2, 2_000_000_000),
        ("250us", 250_000),
        ("1h", 3_600_000_000_000),
        ("0", 0),
    ],
)
def test_durations(text, ns):
    assert parse_duration_ns(text) == ns


@pytest.mark.parametrize("bad", ["-1s", -1, "5 parsecs", "ms", True, None, "1e"])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_duration_ns(bad)


@pytest.mark.parametrize(
    "text,rate", [(20, 20.0), ("4/s", 4.0), ("120/m", 2.0), ("7200/h", 2.0), ("3.5", 3.5)]
)
def test_rates(text, rate):
    assert parse_rate_per_s(text) == pytest.approx(rate)


def test_format_round_trips():
    for ns in (1_500_000_000, 5_000_000, 120_000_000_000, 250_000):
        assert parse_duration_ns(format_duration_ns(ns)) == ns
