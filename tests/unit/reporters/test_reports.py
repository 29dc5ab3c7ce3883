"""Reports read only metrics.json / sweep.json; HTML is self-contained and escapes what users wrote."""

import re

import pytest

from loadtest.reporters import html, markdown
from loadtest.results.model import (
    BackendFacts,
    GpuDevice,
    GpuSeries,
    IntervalPoint,
    LatencySummary,
    RunMetrics,
    Window,
    WorkerClock,
    WorkerStats,
)


def test_run_html_is_self_contained_and_escaped(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "<script>alert(1)</script>",
            "backend": {"kind": "sim", "max_concurrency": 2},
            "workload": {"input_tokens": 5, "output_tokens": 4},
            "load": {"arrival": {"kind": "poisson", "rate": 20}, "duration": "5s"},
            "sla": {"ttft_p50": "1s"},
        }
    )
    doc = RunMetrics.model_validate(m)
    page = html.run_html(doc)
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page
    assert page.count("<script>") == 1  # the page's own, inline
    assert not re.search(
        r"""(src|href)\s*=\s*['"]?(https?:)?//""", page
    )  # nothing fetched from a network
    assert page.count("<svg ") == 2  # percentile plot + time series, inline
    assert "<img" not in page
    md = markdown.render(doc)
    assert "<script>" not in md and "&lt;script&gt;" in md


@pytest.mark.integration
def test_reports_show_gpu_telemetry_roofline_and_profile(tmp_path):
    """GPU plot and tables from the sampled data, the profile window, the roofline; all escaped."""
    from tests.fake_nvml import FakeNVML, run_with_nvml

    data = {
        "name": "inside",
        "backend": {"kind": "sim", "max_concurrency": 2, "decode_ms_per_token": 2},
        "workload": {"input_tokens": 10, "output_tokens": 10},
        "load": {"arrival": {"kind": "poisson", "rate": 40}, "duration": "1.5s"},
        "telemetry": {"interval": "50ms"},
        "profile": {"start": "0.5s", "duration": "0.5s"},
    }
    m = run_with_nvml(tmp_path, data, FakeNVML()).metrics
    m["profile"]["top_ops"] = [
        {
            "name": "aten::<mm>",
            "calls": 3,
            "self_cuda_time_us": 1.0,
            "self_cpu_time_us": 3.0,
            "cpu_time_us": 4.0,
        }
    ]
    m["roofline"] = {
        "peaks": None,
        "model": {
            "linear_flops_per_token": 2_000,
            "attention_flops_per_token_per_context": 64,
            "weight_bytes": 5_000_000,
            "kv_bytes_per_token": 256,
        },
        "decode": {
            "steps": 100,
            "step_ms": 5.0,
            "batch_mean": 1.0,
            "bytes_per_step": 5_000_000,
            "achieved_gb_s": 1.0,
            "achieved_tflops": 0.0004,
            "intensity_flop_per_byte": 0.0004,
        },
        "diagnosis": {
            "verdict": "host/launch-bound",
            "evidence": ["x"],
            "remedies": ["CUDA graphs"],
            "host_heavy_ops": [],
        },
    }
    doc = RunMetrics.model_validate(m)
    page = html.run_html(doc)
    # the time series (GPU activity one of its rows, not a plot of its own), the latency
    # distribution and the roofline's decode point
    assert page.count("<svg ") == 3 and "Roofline points" in page
    assert "GPU 0 kernel-active %" in page
    assert "kernel-active" in page and "aten::&lt;mm&gt;" in page and "host/launch-bound" in page
    md = markdown.render(doc)
    assert (
        "## GPU" in md
        and "## Profiler window" in md
        and "## Roofline" in md
        and "aten::&lt;mm&gt;" in md
    )
    assert "sw_power_cap" in md


def test_a_log_gets_a_plain_progress_line_every_period():
    import asyncio

    from loadtest.execution.live import LivePercentiles, LiveStats
    from loadtest.reporters.progress import choose, plain_progress

    class FakeRunner:
        def __init__(self):
            self.calls = 0

        def stats(self):
            self.calls += 1
            return LiveStats(
                elapsed_s=5.0 * self.calls,
                sent=10 * self.calls,
                completed=8 * self.calls,
                in_flight=2,
                failed=0,
                window_end_s=60.0,
                latency=LivePercentiles(
                    ttft_p50_ms=5.0, ttft_p99_ms=12.5, itl_p50_ms=1.0, itl_p99_ms=2.0
                ),
                gpu_util_pct=[87.0, 3.0],
                planned=100,
            )

    lines: list[str] = []

    async def go():
        task = asyncio.create_task(plain_progress(0.01, lines.append)(FakeRunner()))
        while len(lines) < 2:  # bounded: the test's own timeout stops a broken loop
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(asyncio.wait_for(go(), 10))
    # rates over the last 5 s: 10 sent and 8 done in 5 s
    assert lines[1] == (
        "progress: 10 s of 60 s (50 s left); sent 20/100, done 16, in flight 2, failed 0; "
        "offered 2.0 req/s, delivered 1.6 req/s; TTFT p50 5 p99 12.5 ms; ITL p50 1 p99 2 ms; "
        "GPU 87% 3%"
    )
    assert choose(quiet=True, terminal=False) is None and choose(False, False) is not None


def test_the_live_display_shows_the_same_figures_and_a_counted_run_its_pace():
    import io
    from dataclasses import replace

    from loadtest.execution.live import LivePercentiles, LiveStats
    from loadtest.reporters.console import make_console
    from loadtest.reporters.progress import Rates, _panel, fields, time_left_s

    s = LiveStats(elapsed_s=10.0, sent=40, completed=15, failed=1, in_flight=24, planned=100,
                  window_end_s=None, latency=LivePercentiles(ttft_p99_ms=250.0))  # fmt: skip
    # 16 of 100 finished in 10 s: 84 more at that pace take 52.5 s
    assert time_left_s(s) == 52.5
    rates = Rates()
    assert rates.update(replace(s, elapsed_s=2.0, sent=8, completed=3, failed=0)) == (
        4.0,
        1.5,
    )
    # the 0 s sample is older than the 5 s span now: over 2..10 s, 32 sent and 13 finished
    offered, delivered = rates.update(s)
    assert (offered, delivered) == (4.0, 1.625)
    # rendered through the console the run itself uses (markup off), styles and all
    out = io.StringIO()
    console = make_console(width=120, record=True, color_system="standard", force_terminal=True)
    console.file = out
    console.print(_panel(fields(s, offered, delivered), s.failed))
    text = console.export_text()
    assert "10 s (about 52 s left)" in text and "offered 4.0 req/s, delivered 1.6 req/s" in text
    assert "failed 1" in text and "TTFT p50 - p99 250 ms" in text and "GPU" not in text
    assert "[bold]" not in text and "[/]" not in text and "[red]" not in text
    written = out.getvalue()  # the clock in bold, the counts in red (a request failed)
    assert "\x1b[1m10 s (about 52 s left)" in written and "\x1b[31msent 40/100" in written


def test_the_run_tables_fit_80_columns_with_nothing_cut(run_virtual_fn):
    from rich.console import Console

    from loadtest.reporters import terminal

    m = run_virtual_fn(
        {
            "name": "eighty",
            "backend": {"kind": "sim", "max_concurrency": 1, "decode_ms_per_token": 50},
            "workload": {"input_tokens": 5, "output_tokens": 40},
            "load": {"arrival": {"kind": "poisson", "rate": 40}, "duration": "5s"},
            "sla": {"ttft_p99": "1s", "itl_p99": "100ms", "error_rate": 0.01},
        }
    )  # overloaded: long warnings and SLA evidence
    console = Console(width=80, record=True, color_system=None)
    terminal.render(RunMetrics.model_validate(m), console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80 and not any("…" in line for line in lines)
    assert any("overloaded" in line for line in lines)


def test_a_long_run_plot_stays_small_and_every_series_keeps_its_tooltips():
    """Ten minutes of 1 s intervals and 4 GPU samples a second: the lines keep every point, the
    markers (each with its exact value) are thinned to MAX_MARKERS a series."""
    from loadtest.reporters import plots

    points = [
        IntervalPoint(
            index=i, t_s=float(i), completed=3, failed=0, output_tokens_per_s=100.0 + i % 7,
            ttft_p50_ms=20.0, ttft_p99_ms=40.0 + i % 5, itl_p50_ms=2.0, itl_p99_ms=3.0,
            e2e_p99_ms=300.0,
        )
        for i in range(600)
    ]  # fmt: skip
    t = [i / 4 for i in range(2400)]
    gpu = GpuDevice(index=0, name="GPU", series=GpuSeries(t_s=t, utilization_gpu_pct=[50.0] * 2400))
    window = Window(start_s=10, end_s=590, length_s=580, run_s=600)
    svg = plots.timeseries_plot(points, 1.0, window, [gpu], None)
    assert svg is not None and len(svg) < 1_000_000
    # 6 client series of 600 points and one GPU series of 2400: ceil(n / 240) spacing
    assert svg.count("<title>") == 6 * 200 + 240
    assert "<title>585 s: ttft p99 40 ms</title>" in svg  # every 3rd marker; 585 % 5 == 0


def test_worker_rows_say_where_each_ran_how_late_and_how_well_its_clock_was_known(
    run_virtual_fn,
):
    from loadtest.reporters import insight

    lag = lambda p99: LatencySummary(count=10, p50=p99 / 2, p99=p99)  # noqa: E731
    clock = WorkerClock(method="udp", offset_ms=5000.0, uncertainty_ms=0.01, drift_ms=-0.002)
    workers = [
        WorkerStats(index=0, pid=None, status="ok", valid=True, sent=10, completed=9, failed=1,
                    dispatch_lag_ms=lag(0.2), loop_lag_ms=lag(0.05), host="<b>h1</b>",
                    ip="10.0.0.1", node="abcdef0123456789", clock=clock),
        WorkerStats(index=1, pid=None, status="ok", valid=False, sent=11, completed=11, failed=0,
                    dispatch_lag_ms=lag(7.5), loop_lag_ms=lag(0.1), host="h2",
                    ip="10.0.0.2", node="99998888", clock=None),
    ]  # fmt: skip
    backend = BackendFacts(kind="sim", ray={"ray": "2.60.0", "address": "head:6379", "cpus": 8})
    rows = dict(insight.workers_rows(workers, backend))
    assert rows["workers"] == "2 Ray actors on 2 node(s)"
    assert rows["Ray cluster"] == "head:6379 (Ray 2.60.0, 8 CPUs)"
    assert rows["worst dispatch lag p99"] == "7.5 ms (worker 1)"
    assert rows["worker 0"] == (
        "ok; <b>h1</b> 10.0.0.1 node abcdef01; sent 10, done 9, failed 1; dispatch lag p99 "
        "0.2 ms, loop lag p99 0.05 ms; clock +5000.000 ± 0.010 ms (udp), drift -0.002 ms"
    )
    assert rows["worker 1"].startswith("ok, could not keep up; h2 10.0.0.2 node 99998888;")
    here = BackendFacts(kind="sim")
    assert dict(insight.workers_rows(workers[:1], here))["workers"] == "1 process here"
    m = run_virtual_fn(
        {
            "name": "w",
            "backend": {"kind": "sim"},
            "load": {"arrival": {"kind": "constant", "rate": 10}, "duration": "1s"},
        }
    )
    doc = RunMetrics.model_validate(m).model_copy(update={"workers": workers, "backend": backend})
    md = markdown.render(doc)
    assert "## Client workers" in md and "&lt;b&gt;h1&lt;/b&gt;" in md and "<b>h1" not in md


def test_the_progress_line_shows_e2e_for_answers_with_no_token_stream():
    from loadtest.execution.live import LivePercentiles, LiveStats
    from loadtest.reporters.progress import fields

    def stats(**latency: float | None) -> LiveStats:
        figures = LivePercentiles(**latency)
        return LiveStats(elapsed_s=3.0, sent=9, completed=8, in_flight=1, failed=0, latency=figures)

    pooled = fields(stats(ttft_p50_ms=None, e2e_p50_ms=12.5, e2e_p99_ms=30.0), 3, 3)
    assert pooled[-1] == "E2E p50 12.5 p99 30 ms" and not any("TTFT" in f for f in pooled)
    streamed = fields(stats(ttft_p50_ms=5.0, ttft_p99_ms=9.0, e2e_p50_ms=50.0), 3, 3)
    assert streamed[-2:] == ["TTFT p50 5 p99 9 ms", "ITL p50 - p99 - ms"]


def test_every_report_shows_an_sla_checks_observed_value_and_bound_with_their_unit():
    from rich.console import Console

    from loadtest.reporters import markdown, terminal
    from loadtest.reporters.html.run import sla_html
    from loadtest.results.model.judged import Check, Verdict

    sla = Verdict(
        verdict="FAIL",
        checks=[
            Check(name="ttft_p99", verdict="FAIL", observed=612.25, bound=500.0, op="<=",
                  unit="ms", reason="observed 612.25 ms > 500 ms"),
            Check(name="output_tokens_per_s", verdict="PASS", observed=1234.5, bound=1000.0,
                  op=">=", unit="tok/s", reason="observed 1234 tok/s"),
            Check(name="error_rate", verdict="PASS", observed=0.0, bound=0.01, op="<=",
                  unit="", reason="0 of 10 failed"),
        ],
    )  # fmt: skip
    console = Console(width=160, record=True, color_system=None)
    terminal.render_sla(sla, console)
    texts = [console.export_text(), "\n".join(markdown._sla(sla)), sla_html(sla)]
    for text in texts:  # the same cells in the terminal, Markdown and HTML (escaped there)
        text = text.replace("&lt;", "<").replace("&gt;", ">")
        assert "612.2 ms" in text and "<= 500 ms" in text
        assert "1234 tok/s" in text and ">= 1000 tok/s" in text  # 1234.5 to 4 figures: even
        assert "<= 0.01" in text  # a rate: no unit


def test_compare_names_both_runs_in_full_however_long_their_shared_prefix():
    from rich.console import Console

    from loadtest.reporters import terminal
    from loadtest.results.model.sets import RegressionCheck

    a = "poisson-sla-2026-11-27T21-30-05-candidate-with-a-very-long-name-baseline"
    b = "poisson-sla-2026-11-27T21-30-05-candidate-with-a-very-long-name-release-7"
    check = RegressionCheck(name="ttft_p99", baseline=100.0, candidate=120.0, unit="ms",
                            ratio=1.2, lo=1.1, hi=1.3, verdict="FAIL", reason="slower",
                            change_pct=20.0, change_interval_pct=(10.0, 30.0), significant=True)  # fmt: skip
    console = Console(width=80, record=True, color_system=None)
    terminal.render_compare([check], a, b, 0.95, console)
    text = console.export_text().replace("\n", "")
    assert a in text and b in text  # each whole: the shared prefix cut nothing away
    assert "+20" in text and "ttft_p99 (ms)" in text


def test_a_run_whose_every_request_was_warm_up_still_gets_every_report(run_virtual_fn):
    """Nothing measured (all 3 requests warm-up): no window, so no rate to show, yet every
    report renders (the HTML strip once failed on the missing window)."""
    m = run_virtual_fn(
        {
            "name": "all-warm-up",
            "backend": {"kind": "sim", "max_concurrency": 1},
            "workload": {"input_tokens": 5, "output_tokens": 4},
            "load": {"arrival": {"kind": "concurrency", "users": 1}, "requests": 3, "warmup": 3},
        }
    )
    doc = RunMetrics.model_validate(m)
    assert doc.requests.completed == 0 and doc.throughput.window_s is None
    page = html.run_html(doc)
    assert "output tok/s" in page and "over None" not in page
    assert "all-warm-up" in markdown.render(doc)


def test_a_sweep_point_of_unknown_stability_is_never_shown_steady():
    from loadtest.reporters.sweep_plots import cell, point_kind
    from loadtest.results.model import CurvePoint

    unknown = CurvePoint(x=20, status="ok", steady=None)
    assert point_kind(unknown) == "unknown" and cell(unknown, "steady") == "unknown"
    assert point_kind(CurvePoint(x=40, status="ok", steady=False)) == "unsteady"
    assert point_kind(CurvePoint(x=10, status="ok", steady=True)) == "steady"
    assert cell(CurvePoint(x=80, status="oom"), "steady") is None  # no run: nothing to say
