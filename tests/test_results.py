from loadtest.core.histogram import LatencyHistogram
from loadtest.results.build import _judge_lag


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


def test_non_finite_figures_become_null_with_a_warning_naming_them():
    import json
    import math

    from loadtest.results.build import null_non_finite

    doc = {
        "validity": {"warnings": []},
        "roofline": {"decode": {"mbu": math.nan, "steps": 3}},
        "points": [{"rate": math.inf}, {"rate": 1.5}],
    }
    assert null_non_finite(doc) == ["roofline.decode.mbu", "points[0].rate"]
    assert (
        doc["roofline"]["decode"] == {"mbu": None, "steps": 3} and doc["points"][1]["rate"] == 1.5
    )
    assert "roofline.decode.mbu, points[0].rate" in doc["validity"]["warnings"][0]
    json.dumps(doc, allow_nan=False)  # writable now
    assert null_non_finite({"a": 1.0}) == []
