from loadtest.core.histogram import LatencyHistogram
from loadtest.results.validity import _judge_dispatch, _judge_lag, judge_stamp_delay


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


def test_stamps_late_by_more_than_the_gap_between_tokens_invalidate_the_run():
    # loop lag p99 2 ms (98 at 0.1 ms, 2 at 2 ms), TPOT p50 1 ms: 200% of the gap
    lag = hist([100] * 98 + [2000] * 2)
    reason, warning = judge_stamp_delay(lag, hist([1000] * 10), 1.0)
    assert warning is None
    assert reason.startswith(
        "event-loop lag p99 2 ms is 200% of the typical gap between tokens (TPOT p50 1 ms)"
    )
    # a share of 0.5: 1.5 ms against 2 ms is 75%, past it
    reason, _ = judge_stamp_delay(hist([1500] * 10), hist([2000] * 10), 0.5)
    assert reason is not None and "is 75% of" in reason


def test_stamps_late_by_a_share_of_the_gap_under_a_millisecond_are_a_warning():
    # 0.8 ms against 1 ms is 80%: past the share, but under the 1 ms floor; past a quarter
    reason, warning = judge_stamp_delay(hist([800] * 10), hist([1000] * 10), 1.0)
    assert reason is None and "event-loop lag p99 0.8 ms is 80% of" in warning
    assert warning.endswith("ITL and TPOT percentiles may read up to that much high")


def test_stamps_late_by_a_small_share_of_the_gap_or_with_no_tokens_are_not_judged():
    assert judge_stamp_delay(hist([2000] * 10), hist([20_000] * 10), 1.0) == (None, None)  # 10%
    assert judge_stamp_delay(hist([200] * 10), hist([500] * 10), 1.0) == (None, None)  # 0.2 ms
    assert judge_stamp_delay(hist([5000] * 10), None, 1.0) == (None, None)
    assert judge_stamp_delay(hist([5000] * 10), LatencyHistogram(), 1.0) == (None, None)


def _load(arrival: dict, **validity):
    from loadtest.config.scenario import Scenario

    return Scenario.model_validate(
        {
            "name": "s",
            "backend": {"kind": "sim"},
            "load": {"arrival": arrival, "requests": 512, "validity": validity},
        }
    )


def test_a_burst_is_judged_by_its_last_send_against_the_window_not_per_request():
    # 512 requests due at t0, sent 30 us apart: the last 15.33 ms late, most over 5 ms
    lags = hist([30 * i for i in range(512)])
    burst = _load({"kind": "burst"})
    assert _judge_dispatch(burst, lags, window_s=5.0) == (None, None)  # 0.31% of 5 s
    reason, _ = _judge_dispatch(burst, lags, window_s=1.0)  # 1.53% of 1 s, over 1%
    assert reason is not None and "15.3 ms late, 1.5% of the 1 s window (over 1.0%)" in reason
    looser = _load({"kind": "burst"}, max_burst_send_share=0.02)
    assert _judge_dispatch(looser, lags, window_s=1.0) == (None, None)
    # the same sends on a schedule that meant them apart: late per request, invalid
    poisson = _load({"kind": "poisson", "rate": 100})
    reason, _ = _judge_dispatch(poisson, lags, window_s=5.0)
    assert reason is not None and "345 of 512 late" in reason
    # a burst whose window is unknown falls back to the per-request rule
    assert "345 of 512 late" in _judge_dispatch(burst, lags, window_s=None)[0]
    # sends on time by the per-request rule are on time in a burst too, however short the
    # window: 40 requests, the last 1.17 ms late, 2.3% of a 50 ms window
    small = hist([30 * i for i in range(40)])
    assert _judge_dispatch(burst, small, window_s=0.05) == (None, None)


def _minimal_result(**fields):
    from loadtest.results.model import Requests, RunMetrics, Validity

    base = dict(
        status="failed",
        name="n",
        started_at="2026-01-01T00:00:00+00:00",
        scenario_file="s.yml",
        scenario={},
        environment={},
        backend={"kind": "sim"},
        requests=Requests(),
        validity=Validity(valid=False, reasons=["r"]),
    )
    return RunMetrics(**{**base, **fields})


def test_non_finite_figures_become_null_with_a_warning_naming_them():
    import json
    import math

    from loadtest.results.finish import null_non_finite
    from loadtest.results.model import (
        DecodeRoof,
        GpuDevice,
        GpuSection,
        GpuSeries,
        ModelCosts,
        RooflineSection,
    )

    def roof(mbu: float, step_ms: float) -> RooflineSection:
        return RooflineSection(
            peaks=None,
            model=ModelCosts(
                linear_flops_per_token=2,
                attention_flops_per_token_per_context=4,
                weight_bytes=8,
                kv_bytes_per_token=16,
            ),
            decode=DecodeRoof(
                steps=3, step_ms=step_ms, batch_mean=1.0, bytes_per_step=8, achieved_gb_s=1.0,
                achieved_tflops=1.0, intensity_flop_per_byte=1.0, mbu=mbu,
            ),
        )  # fmt: skip

    series = GpuSeries(t_s=[0.0, 0.25], utilization_gpu_pct=[math.inf, 1.5])
    gpu = GpuSection(available=True, devices=[GpuDevice(index=0, name="g", series=series)])
    result = _minimal_result(roofline=roof(math.nan, 5.0), gpu=gpu)
    fixed = null_non_finite(result)
    assert fixed.roofline.decode.mbu is None and fixed.roofline.decode.step_ms == 5.0
    assert fixed.gpu.devices[0].series.utilization_gpu_pct == [None, 1.5]
    assert (
        "gpu.devices[0].series.utilization_gpu_pct[0], roofline.decode.mbu"
        in fixed.validity.warnings[-1]
    )
    json.dumps(fixed.view(), allow_nan=False)  # writable now
    # a figure a section cannot be without: that section is left out, the rest kept
    fixed = null_non_finite(_minimal_result(roofline=roof(0.5, math.inf), gpu=gpu))
    assert fixed.roofline is None and fixed.gpu.devices[0].series.utilization_gpu_pct == [None, 1.5]
    assert "left out, a figure it needs not being finite: roofline" in fixed.validity.warnings[-1]
    clean = _minimal_result(roofline=roof(0.5, 5.0))
    assert null_non_finite(clean) is clean


def test_result_files_round_trip_and_foreign_or_other_versions_are_refused(tmp_path):
    import pytest

    from loadtest.results.model import ResultReadError, read_run

    result = _minimal_result()
    path = tmp_path / "metrics.json"
    path.write_text(result.to_json())
    assert read_run(path) == result
    path.write_text(result.to_json().replace("loadtest/metrics/v1", "loadtest/metrics/v9"))
    with pytest.raises(
        ResultReadError, match="written as loadtest/metrics/v9; this loadtest reads v1"
    ):
        read_run(path)
    path.write_text('{"schema": "something/else", "status": "ok"}')
    with pytest.raises(ResultReadError, match="not a loadtest metrics file"):
        read_run(path)
    path.write_text(result.to_json().replace('"sent": 0', '"sent": "many"'))
    with pytest.raises(ResultReadError, match="requests.sent"):
        read_run(path)


def test_the_flat_headline_keys_say_what_they_are(run_virtual_fn):
    """``p99_ms`` was end-to-end and read as TTFT: each flat key now names its metric, and the
    old ones stay one release, marked deprecated in the schema."""
    from loadtest.results.model import RunMetrics

    m = run_virtual_fn(
        {
            "name": "flat",
            "backend": {"kind": "sim", "max_concurrency": 4, "decode_ms_per_token": 2},
            "workload": {"input_tokens": 10, "output_tokens": 5},
            "load": {"arrival": {"kind": "constant", "rate": 20}, "duration": "5s"},
        }
    )
    lat = m["latency_ms"]
    for metric, pct in (("ttft", "p50"), ("ttft", "p99"), ("itl", "p50"), ("itl", "p99"),
                        ("e2e", "p50"), ("e2e", "p95"), ("e2e", "p99")):  # fmt: skip
        assert m[f"{metric}_{pct}_ms"] == lat[metric][pct]
    assert (m["p50_ms"], m["p99_ms"]) == (m["e2e_p50_ms"], m["e2e_p99_ms"])
    props = RunMetrics.model_json_schema(by_alias=True)["properties"]
    assert (
        props["p99_ms"].get("deprecated") is True and "e2e_p99_ms" in props["p99_ms"]["description"]
    )
    assert "deprecated" not in props["e2e_p99_ms"]
