"""Parsing a server's Prometheus page and summarising it over the window, by hand."""

from __future__ import annotations

from loadtest.telemetry.server_metrics import ServerSampler, metrics_url, parse

SGLANG = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",tp_rank="0"} 3.0
sglang:num_running_reqs{model_name="m",tp_rank="1"} 1.0
sglang:num_queue_reqs{model_name="m"} 7
sglang:token_usage{model_name="m"} 0.5
sglang:time_to_first_token_seconds_sum{model_name="m"} 2.0
sglang:time_to_first_token_seconds_count{model_name="m"} 10
not_a_number{a="b"} NaN
"""


def test_a_page_is_summed_over_label_sets_and_non_numbers_are_left_out():
    values = parse(SGLANG)
    assert values["sglang:num_running_reqs"] == 4.0  # two label sets
    assert values["sglang:num_queue_reqs"] == 7.0 and "not_a_number" not in values


def test_the_summary_maps_names_and_takes_counter_changes_over_the_window():
    s = ServerSampler("http://x/metrics", 1.0)
    later = SGLANG.replace("} 2.0", "} 3.5").replace("} 10\n", "} 16\n").replace("} 3.0", "} 5.0")
    s.rows = [(1_000_000_000, parse(SGLANG)), (2_500_000_000, parse(later))]
    out = s.summary(0, (0, 10_000_000_000))
    assert out["available"] and out["samples"] == 2
    m = out["metrics"]
    assert m["requests_running"] == {"mean": 5.0, "max": 6.0, "last": 6.0}
    assert m["requests_waiting"]["last"] == 7.0 and m["kv_cache_usage"]["mean"] == 0.5
    # 6 more first tokens took 1.5 s more: 0.25 s each, over the window
    assert m["server_ttft_mean_s"] == {"window": 0.25}
    assert out["server_names"]["requests_running"] == "sglang:num_running_reqs"
    # the gauges over the run, seconds from t0, for the report's time plot
    assert out["series"] == {
        "t_s": [1.0, 2.5],
        "requests_running": [4.0, 6.0],
        "requests_waiting": [7.0, 7.0],
        "kv_cache_usage": [0.5, 0.5],
    }


def test_nothing_sampled_says_why():
    s = ServerSampler("http://x/metrics", 1.0)
    s.last_error = "URLError: connection refused"
    assert s.summary(0, None) == {
        "available": False,
        "source": "http://x/metrics",
        "reason": "URLError: connection refused",
    }


def test_the_metrics_page_sits_beside_the_api():
    assert metrics_url("http://h:8000/v1") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/v1/") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000") == "http://h:8000/metrics"
