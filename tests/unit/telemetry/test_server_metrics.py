"""Parsing a server's Prometheus page and summarising it over the window, by hand."""

from __future__ import annotations

import pytest

from loadtest.telemetry.server_metrics import ServerSampler, metrics_url
from loadtest.telemetry.server_names import parse

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
    out = s.summary(0, (0, 10_000_000_000)).view()
    assert out["available"] and out["samples"] == 2
    m = out["metrics"]
    assert m["requests_running"] == {"mean": 5.0, "max": 6.0, "last": 6.0}
    assert m["requests_waiting"]["last"] == 7.0 and m["kv_cache_usage"]["mean"] == 0.5
    # 6 more first tokens took 1.5 s more: 0.25 s each, over the window
    assert m["ttft_s"] == {"window_mean": 0.25, "window_count": 6.0}
    assert out["server_names"]["requests_running"] == "sglang:num_running_reqs"
    assert out["units"]["kv_cache_usage"].startswith("fraction")
    # the gauges over the run, seconds from t0, for the report's time plot
    assert out["sampled_s"] == [1.0, 2.5]
    assert out["series"] == {
        "t_s": [1.0, 2.5],
        "requests_running": [4.0, 6.0],
        "requests_waiting": [7.0, 7.0],
        "kv_cache_usage": [0.5, 0.5],
    }


def test_nothing_sampled_says_why():
    s = ServerSampler("http://x/metrics", 1.0)
    s.last_error = "URLError: connection refused"
    assert s.summary(0, None).view() == {
        "available": False,
        "source": "http://x/metrics",
        "reason": "URLError: connection refused",
    }


def test_the_metrics_page_sits_beside_the_api():
    assert metrics_url("http://h:8000/v1") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/v1/") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000") == "http://h:8000/metrics"


# A vLLM V1 page as vLLM 0.32 serves it (names read off a running server; values made up).
VLLM_V1 = """vllm:num_requests_running{engine="0",model_name="tiny"} 2.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.125
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 200.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="tiny"} 0.5
vllm:request_queue_time_seconds_count{engine="0",model_name="tiny"} 10.0
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="tiny"} 10.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="tiny"} 1.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="tiny"} 100.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 110.0
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 1280.0
vllm:num_preemptions_total{engine="0",model_name="tiny"} 0.0
"""


def test_vllm_v1_names_give_every_column_with_per_interval_ratios():
    s = ServerSampler("http://x/metrics", 1.0)
    later = (
        VLLM_V1.replace(
            'queries_total{engine="0",model_name="tiny"} 1000.0',
            'queries_total{engine="0",model_name="tiny"} 1600.0',
        )
        .replace(
            'hits_total{engine="0",model_name="tiny"} 200.0',
            'hits_total{engine="0",model_name="tiny"} 650.0',
        )
        .replace(
            'time_seconds_sum{engine="0",model_name="tiny"} 0.5',
            'time_seconds_sum{engine="0",model_name="tiny"} 0.9',
        )
        .replace(
            'time_seconds_count{engine="0",model_name="tiny"} 10.0',
            'time_seconds_count{engine="0",model_name="tiny"} 18.0',
        )
        .replace("} 110.0", "} 366.0")
    )
    assert parse(later)["vllm:prefix_cache_queries_total"] == 1600.0
    # a histogram's buckets are not summed into anything
    assert not any(k.endswith("_bucket") for k in parse(VLLM_V1))
    s.rows = [(1_000_000_000, parse(VLLM_V1)), (3_000_000_000, parse(later))]
    out = s.summary(0, None).view()
    m = out["metrics"]
    # 450 hits of 600 queries between the samples
    assert m["prefix_cache_hit_rate"] == {"window": 0.75}
    assert out["server_names"]["prefix_cache_hit_rate"] == "vllm:prefix_cache_hits"
    # 8 more requests queued 0.4 s more: 50 ms each
    assert m["queue_s"]["window_count"] == 8.0
    assert abs(m["queue_s"]["window_mean"] - 0.05) < 1e-12
    assert m["itl_s"] == {"window_mean": None, "window_count": 0.0}  # no token in between
    assert m["generation_tokens"] == {"run_change": 256.0}
    assert m["kv_cache_usage"]["last"] == 0.125
    rows = s.csv_rows(0)
    assert rows[0]["prefix_cache_hit_rate"] is None  # no interval before the first sample
    assert rows[1]["prefix_cache_hit_rate"] == 0.75
    assert abs(rows[1]["queue_s_mean"] - 0.05) < 1e-12


def test_older_servers_fall_back_to_their_own_hit_rate_gauge():
    s = ServerSampler("http://x/metrics", 1.0)
    s.rows = [
        (0, {"vllm:gpu_prefix_cache_hit_rate": 0.3}),
        (1, {"vllm:gpu_prefix_cache_hit_rate": 0.4}),
    ]
    out = s.summary(0, None).view()
    assert out["metrics"]["prefix_cache_hit_rate"] == {"window": 0.4}
    assert out["server_names"]["prefix_cache_hit_rate"] == "vllm:gpu_prefix_cache_hit_rate"


def test_a_huge_page_is_read_line_by_line_keeping_only_mapped_names_up_to_a_limit():
    import io

    from loadtest.telemetry.server_names import read_page

    noise = b"".join(b'other_metric{i="%d"} 1\n' % i for i in range(50_000))
    page = b"vllm:num_requests_running 3\n" + noise + b"vllm:num_requests_waiting 2\n"
    values, cut = read_page(io.BytesIO(page), 8 << 20)
    assert values == {"vllm:num_requests_running": 3.0, "vllm:num_requests_waiting": 2.0}
    assert not cut
    values, cut = read_page(io.BytesIO(page), 1 << 16)  # past the limit: what came before it
    assert values == {"vllm:num_requests_running": 3.0} and cut


def _spec_page(drafts: int, draft_tokens: int, accepted: int) -> str:
    return (
        f'vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts}\n'
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {draft_tokens}\n'
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {accepted}\n'
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="0"}} 99\n'
    )


def test_speculative_decoding_gives_the_acceptance_rate_and_length_over_the_window():
    s = ServerSampler("http://x/metrics", 1.0)
    s.rows = [
        (0, parse(_spec_page(10, 30, 12))),
        (1_000_000_000, parse(_spec_page(20, 60, 30))),
        (2_000_000_000, parse(_spec_page(40, 120, 54))),
    ]
    out = s.summary(0, (1_000_000_000, 2_000_000_000)).view()
    m = out["metrics"]
    # in the window: 20 drafts of 60 tokens, 24 accepted: 0.4 accepted, 1 + 24/20 tokens a step
    assert m["spec_acceptance_rate"] == {"window": 0.4}
    assert m["spec_accept_length"] == {"window": 2.2}
    # over the run: the counters' change from the first sample to the last
    assert m["spec_drafts"] == {"run_change": 30.0}
    assert m["spec_accepted_tokens"] == {"run_change": 42.0}
    assert out["units"]["spec_accept_length"].startswith("tokens a verification step")
    rows = s.csv_rows(0)  # per interval: 18/30 then 24/60, and 1 + 18/10, 1 + 24/20
    assert [r["spec_acceptance_rate"] for r in rows] == [None, 0.6, 0.4]
    assert [r["spec_accept_length"] for r in rows] == [None, 2.8, 2.2]


def test_sglang_publishes_its_speculative_figures_as_gauges():
    s = ServerSampler("http://x/metrics", 1.0)
    page = 'sglang:spec_accept_length{model_name="m"} 3.1\nsglang:spec_accept_rate{model_name="m"} 0.7\n'
    s.rows = [(0, parse(page)), (1, parse(page))]
    m = s.summary(0, None).view()["metrics"]
    assert m["spec_accept_length"] == {"window": 3.1}
    assert m["spec_acceptance_rate"] == {"window": 0.7}


def test_two_data_parallel_engines_sum_their_counts_and_average_their_fractions():
    page = """\
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 4
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.6
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 10
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 30
sglang:cache_hit_rate{dp="0"} 0.2
sglang:cache_hit_rate{dp="1"} 0.4
"""
    values = parse(page)
    assert values["vllm:num_requests_running"] == 7  # requests: both engines'
    assert values["vllm:prefix_cache_hits_total"] == 40
    # fractions of each engine's own cache: the share of both caches, not 1.3
    assert values["vllm:kv_cache_usage_perc"] == pytest.approx(0.65)
    assert values["sglang:cache_hit_rate"] == pytest.approx(0.3)


def test_a_server_of_several_models_gives_each_its_own_queue_and_ttft():
    """Series labelled by model (a gateway's, or a server of several models): the whole is
    summed as ever, and each model's own figures are taken from its own series."""
    page = """\
vllm:num_requests_waiting{engine="0",model_name="a"} 2
vllm:num_requests_waiting{engine="0",model_name="b"} 6
vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.2
vllm:kv_cache_usage_perc{engine="0",model_name="b"} 0.4
vllm:request_queue_time_seconds_sum{model_name="a"} 1.0
vllm:request_queue_time_seconds_count{model_name="a"} 10
vllm:request_queue_time_seconds_sum{model_name="b"} 4.0
vllm:request_queue_time_seconds_count{model_name="b"} 10
vllm:time_to_first_token_seconds_sum{model_name="a"} 2.0
vllm:time_to_first_token_seconds_count{model_name="a"} 10
vllm:time_to_first_token_seconds_sum{model_name="b"} 5.0
vllm:time_to_first_token_seconds_count{model_name="b"} 10
"""
    later = (
        page.replace('"a"} 1.0', '"a"} 1.5').replace('"a"} 2.0', '"a"} 2.2')
        .replace('"b"} 4.0', '"b"} 7.0').replace('"b"} 5.0', '"b"} 9.0')
        .replace('"a"} 10', '"a"} 15').replace('"b"} 10', '"b"} 20')
    )  # fmt: skip
    s = ServerSampler("http://x/metrics", 1.0)
    s.rows = [(1_000_000_000, parse(page)), (2_000_000_000, parse(later))]
    out = s.summary(0, None).view()
    assert out["metrics"]["requests_waiting"]["last"] == 8.0
    assert out["metrics"]["kv_cache_usage"]["last"] == pytest.approx(0.3)
    a, b = out["by_model"]["a"], out["by_model"]["b"]
    # a: 5 more requests queued 0.5 s more (0.1 s each), their first tokens 0.2 s more
    assert a["queue_s"]["window_mean"] == pytest.approx(0.1)
    assert a["ttft_s"]["window_mean"] == pytest.approx(0.04)
    # b: 10 more, 3 s and 4 s more
    assert b["queue_s"]["window_mean"] == pytest.approx(0.3)
    assert b["ttft_s"]["window_mean"] == pytest.approx(0.4)
    assert (a["requests_waiting"]["last"], b["requests_waiting"]["last"]) == (2.0, 6.0)
    assert (a["kv_cache_usage"]["last"], b["kv_cache_usage"]["last"]) == (0.2, 0.4)


def test_one_model_gives_no_breakdown():
    s = ServerSampler("http://x/metrics", 1.0)
    s.rows = [(1, parse(SGLANG)), (2, parse(SGLANG))]
    assert "by_model" not in s.summary(0, None).view()


def test_data_parallel_engines_each_keep_their_own_cache_and_queue():
    page = """\
vllm:num_requests_waiting{engine="0",model_name="m"} 1
vllm:num_requests_waiting{engine="1",model_name="m"} 5
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.6
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7
"""
    s = ServerSampler("http://x/metrics", 1.0)
    s.rows = [(1, parse(page)), (2, parse(page))]
    out = s.summary(0, None).view()
    assert "by_model" not in out  # one model
    engines = out["by_engine"]
    assert engines["0"]["kv_cache_usage"]["last"] == 0.6
    assert engines["1"]["kv_cache_usage"]["last"] == 0.7
    assert engines["1"]["requests_waiting"]["mean"] == 5.0
    assert out["metrics"]["kv_cache_usage"]["last"] == pytest.approx(0.65)


def test_a_stop_for_a_signal_does_not_wait_on_a_server_whose_metrics_hang():
    """A /metrics that never answers (a stalled server): a signal's stop (not final) leaves at
    once, with no last scrape, so the result is written within the grace period; the final
    stop waits for the scrape under way to time out (2 s), then tries one more."""
    import socket
    import time

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepted by the kernel, never answered
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/metrics"
    try:
        took = {}
        for final in (False, True):
            s = ServerSampler(url, 1.0, timeout_s=2.0)
            s.start()
            time.sleep(0.2)  # its first scrape is under way
            t = time.monotonic()
            s.stop(final)
            took[final] = time.monotonic() - t
    finally:
        silent.close()
    assert took[False] < 1.5  # STOPPING_JOIN_S, with room for a busy machine
    assert took[True] >= 1.5  # the scrape's 2 s timeout, less the 0.2 s it had run
