from loadtest.histogram import LatencyHistogram
from loadtest.results import _judge_lag


def hist(values_us):
    h = LatencyHistogram()
    for v in values_us:
        h.record_us(v)
    return h


def test_one_late_dispatch_is_a_warning_not_an_invalid_run():
    reason, warning = _judge_lag("dispatch lag", hist([10] * 11 + [6000]), 5_000_000)
    assert reason is None and "1 of 12 over 5 ms" in warning


def test_more_than_one_percent_late_invalidates():
    reason, _ = _judge_lag("dispatch lag", hist([10] * 97 + [9000] * 3), 5_000_000)
    assert reason is not None and "3 of 100 late" in reason


def test_under_one_percent_late_is_valid_with_a_warning():
    reason, warning = _judge_lag("dispatch lag", hist([10] * 995 + [9000] * 5), 5_000_000)
    assert reason is None and "5 of 1000" in warning
