"""Plots as PNG data URIs (matplotlib, imported here only, with the non-interactive backend).

Each function takes plain data from metrics.json / sweep.json and returns ``data:image/png;...``.
"""

from __future__ import annotations

import base64
import io

from loadtest.core.histogram import LatencyHistogram

TAIL_PERCENTILES = [0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 99.999]


def _fig(w=7.0, h=3.6):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(w, h), dpi=110)
    ax.grid(True, alpha=0.3)
    return plt, fig, ax


def _uri(plt, fig) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def percentile_plot(histograms: dict[str, str], metrics=("ttft", "itl", "e2e")) -> str | None:
    """HDR-style percentile distribution: x = 1/(1 - p) on a log axis, so the long tail is visible."""
    series = []
    for m in metrics:
        h = LatencyHistogram.decode(histograms[m]) if histograms.get(m) else None
        if h and h.count:
            series.append((m, [h.percentile_ms(p) for p in TAIL_PERCENTILES]))
    if not series:
        return None
    plt, fig, ax = _fig()
    xs = [1 / (1 - p / 100) if p < 100 else 1e6 for p in TAIL_PERCENTILES]
    for name, ys in series:
        ax.plot(xs, ys, marker="o", markersize=3, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([1, 2, 10, 100, 1000, 10000, 100000])
    ax.set_xticklabels(["0%", "50%", "90%", "99%", "99.9%", "99.99%", "99.999%"])
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency by percentile (from the saved HDR histograms)")
    ax.legend()
    return _uri(plt, fig)


def timeseries_plot(points: list[dict], interval_s: float) -> str | None:
    """Output tok/s and p99 latencies per interval, as a PNG (base64)."""
    if not points:
        return None
    plt, fig, ax = _fig(7.0, 3.8)
    t = [p["t_s"] for p in points]
    ax.plot(t, [p["output_tokens_per_s"] for p in points], color="tab:blue", label="output tok/s")
    ax.set_xlabel(f"time from t0 (s), {interval_s:g} s intervals")
    ax.set_ylabel("output tok/s", color="tab:blue")
    ax2 = ax.twinx()
    for key, color in (
        ("ttft_p99_ms", "tab:orange"),
        ("e2e_p99_ms", "tab:red"),
        ("itl_p99_ms", "tab:green"),
    ):
        ys = [p.get(key) for p in points]
        if any(y is not None for y in ys):
            ax2.plot(
                t,
                [float("nan") if y is None else y for y in ys],
                color=color,
                label=key.replace("_ms", ""),
            )
    ax2.set_ylabel("p99 latency (ms), by completion time")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left", fontsize=8)
    ax.set_title("Throughput and tail latency over the run")
    return _uri(plt, fig)


def sweep_plots(curve: list[dict], axis: str, knee) -> list[tuple[str, str]]:
    """Throughput and latency against the swept axis, and the throughput-latency frontier."""
    ok = [c for c in curve if c.get("output_tokens_per_s") is not None]
    if not ok:
        return []
    xs = [c["x"] for c in ok]
    out = []
    plt, fig, ax = _fig()
    ax.plot(xs, [c["output_tokens_per_s"] for c in ok], marker="o")
    if knee is not None:
        ax.axvline(knee, color="grey", linestyle="--", label=f"knee ({knee})")
        ax.legend()
    ax.set_xlabel(axis)
    ax.set_ylabel("output tok/s")
    ax.set_title(f"Throughput vs {axis}")
    out.append(("throughput", _uri(plt, fig)))
    plt, fig, ax = _fig()
    for key in ("ttft_p99_ms", "itl_p99_ms", "e2e_p99_ms"):
        ax.plot(
            xs,
            [float("nan") if c.get(key) is None else c[key] for c in ok],
            marker="o",
            label=key.replace("_ms", ""),
        )
    ax.set_yscale("log")
    ax.set_xlabel(axis)
    ax.set_ylabel("ms")
    ax.legend()
    ax.set_title(f"p99 latencies vs {axis}")
    out.append(("latency", _uri(plt, fig)))
    both = [c for c in ok if c.get("e2e_p99_ms") is not None]
    if not both:
        return out
    plt, fig, ax = _fig()
    ax.plot([c["e2e_p99_ms"] for c in both], [c["output_tokens_per_s"] for c in both], marker="o")
    for c in both:
        ax.annotate(str(c["x"]), (c["e2e_p99_ms"], c["output_tokens_per_s"]), fontsize=8)
    ax.set_xlabel("p99 end-to-end latency (ms)")
    ax.set_ylabel("output tok/s")
    ax.set_title("Throughput-latency frontier")
    out.append(("frontier", _uri(plt, fig)))
    return out


def gpu_plot(device: dict, points: list[dict]) -> str | None:
    """GPU kernel-active %, SM activity (Hopper) and power on the run's time axis, beside throughput."""
    series = device.get("series") or {}
    t = series.get("t_s") or []
    if not t:
        return None
    plt, fig, ax = _fig(7.0, 3.6)
    for key, label, color in (
        ("utilization_gpu_pct", "kernel-active %", "tab:blue"),
        ("sm_activity_pct", "SM activity % (GPM)", "tab:purple"),
    ):
        ys = series.get(key) or []
        if any(y is not None for y in ys):
            ax.plot(t, [float("nan") if y is None else y for y in ys], color=color, label=label)
    ax.set_ylim(0, 105)
    ax.set_xlabel("time from t0 (s)")
    ax.set_ylabel("%")
    ax2 = ax.twinx()
    power = series.get("power_w") or []
    if any(p is not None for p in power):
        ax2.plot(
            t, [float("nan") if p is None else p for p in power], color="tab:red", label="power W"
        )
        ax2.set_ylabel("power (W)", color="tab:red")
    if points:
        ax3 = ax.twinx()
        ax3.spines["right"].set_position(("axes", 1.12))
        ax3.plot(
            [p["t_s"] for p in points],
            [p["output_tokens_per_s"] for p in points],
            color="grey",
            alpha=0.5,
            linestyle="--",
            label="output tok/s",
        )
        ax3.set_ylabel("output tok/s", color="grey")
    handles, labels = [], []
    for a in fig.axes:
        h, lab = a.get_legend_handles_labels()
        handles += h
        labels += lab
    ax.legend(handles, labels, loc="lower left", fontsize=8)
    ax.set_title(f"GPU {device['index']} ({device['name']}) over the run")
    return _uri(plt, fig)
