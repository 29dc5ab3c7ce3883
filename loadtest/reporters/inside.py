"""What was seen inside the run, as label/value rows every report format renders: the GPU
telemetry, the roofline and its diagnosis, the profiler window, the server's own metrics."""

from __future__ import annotations

from loadtest.reporters.figures import text_of
from loadtest.results.model import (
    GpuSection,
    Operator,
    ProfileSection,
    RooflineSection,
    ServerSection,
)


def server_rows(server: ServerSection | None) -> list[tuple[str, str]]:
    """Label/value rows of the server's own /metrics over the window, each with its unit."""
    if not server:
        return []
    if not server.available:
        return [("server /metrics", f"unavailable: {server.reason}")]
    rows = [("source", f"{server.source} ({server.samples} samples)")]
    units, names = server.units or {}, server.server_names or {}
    for name, m in (server.metrics or {}).items():
        unit = units.get(name, "")
        if m.kind == "histogram":
            shown = (
                f"mean {text_of(m.window_mean and m.window_mean * 1e3, '{:.4g}')} ms over "
                f"{text_of(m.window_count, '{:.0f}')} requests in the window"
            )
        elif m.kind == "counter":
            shown = f"{text_of(m.run_change, '{:.0f}')} {unit} over the run"
        elif m.kind == "ratio":
            shown = f"{text_of(m.window, '{:.4g}')} over the window ({unit})"
        else:
            shown = f"mean {text_of(m.mean, '{:.4g}')}, max {text_of(m.max, '{:.4g}')} ({unit})"
        rows.append((f"{name} ({names.get(name, '?')})", shown))
    cmp = server.ttft_compared
    if cmp:
        rows.append(
            (
                "TTFT, the same requests: client (from its send) vs server",
                f"{cmp.client_service_mean_ms:.4g} vs {cmp.server_mean_ms:.4g} ms mean "
                f"({cmp.client_requests} and {cmp.server_requests} requests)",
            )
        )
    return rows


def gpu_rows(gpu: GpuSection | None) -> list[tuple[str, str]]:
    """Label/value rows summarising GPU telemetry for the reports."""
    if not gpu:
        return []
    if not gpu.available:
        return [("GPU telemetry", f"unavailable: {gpu.reason}")]
    rows = []
    for d in gpu.devices or []:
        g = f"GPU {d.index} {d.name}"
        util, sm, power = d.utilization_gpu_pct, d.gpm_sm_activity_pct, d.power_w
        rows += [
            (
                f"{g}: kernel-active (NVML utilization)",
                f"mean {text_of(util and util.mean)}%, p95 {text_of(util and util.p95)}%, "
                f"max {text_of(util and util.max)}%",
            ),
            (f"{g}: SM activity (GPM)", f"mean {text_of(sm.mean)}%" if sm else "unavailable"),
            (f"{g}: memory", f"peak {text_of(d.peak_memory_mib, '{:.0f}')} MiB"),
            (
                f"{g}: power",
                f"mean {text_of(power and power.mean)} W, max {text_of(power and power.max)} W",
            ),
            (
                f"{g}: energy over the window",
                f"{text_of(d.energy_j, '{:.1f}')} J (power integrated over the same "
                f"{text_of(d.energy_span_s)} s: {text_of(d.energy_integrated_j, '{:.1f}')} J), "
                f"{text_of(d.joules_per_output_token)} J per output token",
            ),
            (
                f"{g}: SM clock",
                f"mean {text_of(d.clocks_sm_mhz and d.clocks_sm_mhz.mean, '{:.0f}')} MHz",
            ),
            (f"{g}: throttle reasons seen", ", ".join(d.throttle_reasons_seen) or "none"),
        ]
        if d.unavailable:
            rows.append(
                (
                    f"{g}: unavailable metrics",
                    "; ".join(f"{k}: {v}" for k, v in d.unavailable.items()),
                )
            )
    s = gpu.sampler
    if s is not None:
        # NVML is sampled in this process (its CPU cost is measured); a DCGM exporter elsewhere
        # (its source says so) has no cost here to show
        cost = s.cpu_pct_of_one_core
        rows.append(
            (
                "sampler",
                f"{s.samples} samples every {gpu.interval_s:g} s, {s.errors} read errors"
                + (f", {text_of(cost)}% of one CPU core" if cost is not None else "")
                + (f" ({gpu.source})" if gpu.source else ""),
            )
        )
    return rows


def gpu_lines(gpu: GpuSection | None) -> list[str]:
    """One line a GPU for the terminal: kernel-active share, peak memory, power, SM clock and
    the throttle reasons seen over the window."""
    if not gpu or not gpu.available:
        return []
    lines = []
    for d in gpu.devices or []:
        util, power, clock = d.utilization_gpu_pct, d.power_w, d.clocks_sm_mhz
        throttled = ", ".join(d.throttle_reasons_seen) or "none"
        lines.append(
            f"GPU {d.index} {d.name}: kernel-active {text_of(util and util.mean, '{:.0f}%')}, "
            f"peak {text_of(d.peak_memory_mib, '{:,.0f} MiB')}, "
            f"power {text_of(power and power.mean, '{:.0f} W')}, "
            f"SM {text_of(clock and clock.mean, '{:.0f} MHz')}, throttled: {throttled}"
        )
    return lines


def roofline_rows(r: RooflineSection | None) -> list[tuple[str, str]]:
    """Label/value rows of the roofline (MBU, MFU, floor, diagnosis) for the reports."""
    if not r:
        return []
    rows = []
    peaks = r.peaks
    rows.append(
        (
            "peaks",
            f"{peaks.bw_gb_s:g} GB/s, {peaks.tflops:g} TFLOP/s ({peaks.source})"
            if peaks
            else "unknown for this device (run `loadtest calibrate`)",
        )
    )
    if r.estimated:
        rows.append(("estimated", r.estimated))
    d = r.decode
    if d:
        rows.append(
            (
                "decode",
                f"step {d.step_ms} ms at batch {d.batch_mean} (floor {text_of(d.floor_ms)} ms); "
                f"{d.achieved_gb_s:g} GB/s, MBU {text_of(d.mbu, '{:.1%}')}, MFU {text_of(d.mfu, '{:.2%}')}",
            )
        )
    p = r.prefill
    if p:
        rows.append(
            (
                "prefill",
                f"{p.tokens_per_s:g} tokens/s, {p.achieved_tflops:g} TFLOP/s, MFU {text_of(p.mfu, '{:.1%}')}",
            )
        )
    diag = r.diagnosis
    rows.append(("diagnosis", diag.verdict if diag else "-"))
    if diag:
        rows += [("evidence", e) for e in diag.evidence]
        rows += [("remedy", x) for x in diag.remedies]
    return rows


def profile_rows(p: ProfileSection | None) -> tuple[list[tuple[str, str]], list[Operator]]:
    """Rows of the profiler window and its top operators, for the reports."""
    if not p:
        return [], []
    rows = [
        ("window", f"{text_of(p.window.start_s)} s .. {text_of(p.window.end_s)} s from t0"),
        (
            "requests overlapping it",
            f"{p.requests_flagged} ({'left out of' if p.excluded_from_stats else 'kept in'} "
            "the latency statistics)",
        ),
        ("profiler", p.profiler or "-"),
    ]
    if p.trace:
        rows.append(
            (
                "trace",
                f"{p.trace} (Chrome trace format: open in https://ui.perfetto.dev or chrome://tracing)",
            )
        )
    k = p.kernel_summary
    if k:
        rows.append(
            (
                "CUDA kernels",
                f"{k.launches} launches of {k.distinct} kernels, {text_of(k.under_10us_share, '{:.0%}')} under 10 µs",
            )
        )
    return rows, p.top_ops or []
