"""Plots as inline SVG, drawn by matplotlib (imported here only, with its non-interactive backend).

Why matplotlib SVG with light JavaScript rather than plotly, Vega-Lite or uPlot: an SVG is there
with JavaScript off, prints as vectors and needs no bundle (plotly's offline bundle alone is
~3.5 MB, over the report's 2 MB budget, and a vendored bundle is code to keep current);
matplotlib is already a dependency. Hover gives exact values: every marker carries its values in
an SVG ``<title>`` (the browser's own tooltip, JavaScript or not), which the page's small script
turns into a styled tooltip. Every function takes plain data from metrics.json / sweep.json and
returns the ``<svg>`` element's text, or None when there is nothing to draw.
"""

from __future__ import annotations

import io
import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from loadtest.core.histogram import LatencyHistogram
from loadtest.results.model import GpuDevice, IntervalPoint, Peaks, RooflineSection, Window

if TYPE_CHECKING:
    from matplotlib.axes import Axes

TAIL_PERCENTILES = [0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 99.999, 100]
SVG_NS, XLINK_NS = "http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"
MAX_MARKERS = 240  # markers (and tooltips) a series at most; the line itself keeps every point


def finite(v: object, log: bool = False) -> bool:
    return (
        isinstance(v, (int, float))
        and not isinstance(v, bool)
        and math.isfinite(v)
        and (not log or v > 0)
    )


class Plot:
    """One figure, its series' tooltips, and its SVG text with a ``<title>`` on each marker."""

    def __init__(self, name: str, rows: int = 1, height: float = 3.4, sharex: bool = True):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.plt, self.name = plt, name
        self.tips: dict[str, list[str]] = {}  # a marker series' gid -> each marker's tooltip
        # Any: matplotlib types rc keys as one Literal of every setting's name
        self.rc: Any = {"svg.fonttype": "none", "svg.hashsalt": name, "font.size": 9}
        with matplotlib.rc_context(self.rc):
            self.fig, axes = plt.subplots(
                rows,
                1,
                figsize=(8.0, height * rows),
                layout="constrained",
                sharex=sharex,
                squeeze=False,
            )
        self.axes = [a[0] for a in axes]
        for ax in self.axes:
            ax.grid(True, alpha=0.3)

    def series(
        self,
        ax: Axes,
        xs: Sequence[float | None],
        ys: Sequence[float | None],
        tips: Sequence[str],
        label: str | None = None,
        log_y: bool = False,
        log_x: bool = False,
        **style: Any,
    ) -> None:
        """A line through the finite points; markers with tooltips on at most MAX_MARKERS of them."""
        pts = [(x, y, t) for x, y, t in zip(xs, ys, tips) if finite(x, log_x) and finite(y, log_y)]
        if not pts:
            return
        px, py, pt = zip(*pts)
        marker = style.pop("marker", "o")
        ms = style.pop("markersize", 4)
        linestyle = style.pop("linestyle", "-")
        if linestyle not in ("", "none"):
            (line,) = ax.plot(px, py, linestyle=linestyle, label=label, **style)
            style["color"] = line.get_color()  # the markers in the line's colour
            label = None
        step = max(1, math.ceil(len(px) / MAX_MARKERS))
        gid = f"{self.name}-s{len(self.tips)}"
        (markers,) = ax.plot(
            px[::step],
            py[::step],
            linestyle="none",
            marker=marker,
            markersize=ms,
            label=label,
            **style,
        )
        markers.set_gid(gid)
        self.tips[gid] = list(pt[::step])

    def svg(self) -> str:
        """The figure as an ``<svg>`` element (no XML prolog), each marker titled with its values."""
        import matplotlib

        buf = io.StringIO()
        with matplotlib.rc_context(self.rc):
            self.fig.savefig(buf, format="svg", bbox_inches="tight")
        self.plt.close(self.fig)
        ET.register_namespace("", SVG_NS)
        ET.register_namespace("xlink", XLINK_NS)
        root = ET.fromstring(buf.getvalue())
        for meta in root.findall(f"{{{SVG_NS}}}metadata"):  # matplotlib's RDF: nothing to show
            root.remove(meta)
        for g in root.iter(f"{{{SVG_NS}}}g"):
            tips = self.tips.get(g.get("id", ""))
            if tips is None:
                continue
            uses = list(g.iter(f"{{{SVG_NS}}}use"))
            if len(uses) != len(tips):  # markers clipped away: no tooltip rather than a wrong one
                continue
            for use, tip in zip(uses, tips):
                use.set("class", "pt")
                ET.SubElement(use, f"{{{SVG_NS}}}title").text = tip  # ElementTree escapes it
        root.set("class", "plot")
        root.set("role", "img")
        return ET.tostring(root, encoding="unicode")


def _percentile_x(p: float) -> float:
    return 1 / (1 - p / 100) if p < 100 else 1e6


def _percentile_axis(ax: Axes) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([1, 2, 10, 100, 1000, 10000, 100000, 1e6])
    ax.set_xticklabels(["0%", "50%", "90%", "99%", "99.9%", "99.99%", "99.999%", "max"])
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency (ms)")


COLORS = {"ttft": "#1a73e8", "itl": "#188038", "e2e": "#d93025", "queue": "#9334e6"}


def percentile_plot(
    runs: list[tuple[str, dict[str, str]]],
    metrics: Sequence[str] = ("ttft", "itl", "e2e"),
    name: str = "pct",
) -> str | None:
    """Latency by percentile from saved HDR histograms, x = 1/(1 - p) on a log axis so the tail
    shows. ``runs``: (label, encoded histograms); each further run is overlaid in another line
    style (dashed for the second)."""
    plot = Plot(name, height=3.8)
    ax = plot.axes[0]
    drawn = False
    for k, (run_label, histograms) in enumerate(runs):
        for metric in metrics:
            h = LatencyHistogram.decode(histograms[metric]) if histograms.get(metric) else None
            if not h or not h.count:
                continue
            ys = [h.percentile_ms(p) for p in TAIL_PERCENTILES]
            label = metric if len(runs) == 1 else f"{metric} {run_label}"
            tips = [
                f"{label} p{p:g}: {y:.4g} ms" if p < 100 else f"{label} max: {y:.4g} ms"
                for p, y in zip(TAIL_PERCENTILES, ys)
            ]
            plot.series(
                ax,
                [_percentile_x(p) for p in TAIL_PERCENTILES],
                ys,
                tips,
                label=label,
                log_x=True,
                log_y=True,
                color=COLORS.get(metric),
                linestyle=("-", "--", ":", "-.")[k % 4],
                marker="osD^v"[k % 5],
            )
            drawn = True
    if not drawn:
        plot.plt.close(plot.fig)
        return None
    _percentile_axis(ax)
    ax.set_title("Latency by percentile (from the HDR histograms)")
    ax.legend(fontsize=8, ncol=2 if len(runs) > 1 else 1)
    return plot.svg()


def timeseries_plot(
    points: list[IntervalPoint],
    interval_s: float,
    window: Window | None = None,
    gpus: list[GpuDevice] | None = None,
    server_series: dict[str, list[float | None]] | None = None,
) -> str | None:
    """The run over time on one shared time axis: throughput, TTFT/ITL percentiles per interval,
    then GPU activity (per device) and the server's own gauges where they were sampled."""
    gpus = [d for d in gpus or [] if d.series and d.series.t_s]
    server = server_series if server_series and len(server_series.get("t_s") or []) > 1 else None
    if not points and not gpus and not server:
        return None
    plot = Plot("time", rows=2 + (1 if gpus else 0) + (1 if server else 0), height=2.2)
    _throughput_row(plot, plot.axes[0], points, interval_s)
    _latency_row(plot, plot.axes[1], points)
    row = 2
    if gpus:
        _gpu_row(plot, plot.axes[row], gpus)
        row += 1
    if server:
        ax = plot.axes[row]
        for key in server:
            if key != "t_s":
                _gauge(plot, ax, server["t_s"], server[key], key, f"server {key}")
        ax.set_ylabel("server gauges")
    for ax in plot.axes:
        if window and window.start_s is not None and window.end_s is not None:
            ax.axvspan(window.start_s, window.end_s, color="#1a73e8", alpha=0.06, lw=0)
        handles, _ = ax.get_legend_handles_labels()
        if handles:  # beside the plot, never over the data
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    plot.axes[-1].set_xlabel("time from t0 (s); shaded: the measurement window")
    return plot.svg()


def _throughput_row(plot: Plot, ax: Axes, points: list[IntervalPoint], interval_s: float) -> None:
    plot.series(
        ax,
        [p.t_s for p in points],
        [p.output_tokens_per_s for p in points],
        [
            f"{p.t_s:g} s: {p.output_tokens_per_s:.4g} output tok/s, {p.completed} done"
            for p in points
        ],
        label="output tok/s",
        color="#1a73e8",
    )
    ax.set_ylabel("output tok/s")
    ax.set_title(f"The run over time ({interval_s:g} s intervals, latencies by completion time)")


def _latency_row(plot: Plot, ax: Axes, points: list[IntervalPoint]) -> None:
    t = [p.t_s for p in points]
    for key, color, style in (
        ("ttft_p50_ms", COLORS["ttft"], ":"),
        ("ttft_p99_ms", COLORS["ttft"], "-"),
        ("itl_p50_ms", COLORS["itl"], ":"),
        ("itl_p99_ms", COLORS["itl"], "-"),
        ("e2e_p99_ms", COLORS["e2e"], "-"),
    ):
        label = key.replace("_ms", "").replace("_", " ")
        plot.series(
            ax,
            t,
            [p.figure(key) for p in points],
            [f"{p.t_s:g} s: {label} {p.figure(key) or 0:.4g} ms" for p in points],
            label=label,
            log_y=True,
            color=color,
            linestyle=style,
            markersize=3,
        )
    ax.set_yscale("log")
    ax.set_ylabel("ms")


def _gpu_row(plot: Plot, ax: Axes, gpus: list[GpuDevice]) -> None:
    for d in gpus:
        s = d.series
        if s is None:
            continue
        for values, label in (
            (s.utilization_gpu_pct, "kernel-active %"),
            (s.sm_activity_pct, "SM activity %"),
        ):
            _gauge(plot, ax, s.t_s, values, f"GPU {d.index} {label}")
    ax.set_ylim(0, 105)
    ax.set_ylabel("GPU %")


def _gauge(
    plot: Plot,
    ax: Axes,
    t: Sequence[float | None],
    ys: Sequence[float | None],
    name: str,
    tip_name: str | None = None,
) -> None:
    """A sampled gauge over time (GPU activity, a server's queue): small markers, exact tips."""
    tips = [f"{x:g} s: {tip_name or name} {y}" for x, y in zip(t, ys)]
    plot.series(ax, t, ys, tips, label=name, markersize=2)


def roofline_plot(roofline: RooflineSection | None) -> str | None:
    """The device's roof (bandwidth slope and compute ceiling) with this run's decode and prefill
    points; without known peaks, the points alone and a note saying so."""
    if roofline is None:
        return None
    pts: list[tuple[str, float, float, float | None, float | None]] = [
        (phase, p.intensity_flop_per_byte, p.achieved_tflops, mbu, p.mfu)
        for phase, p, mbu in (
            ("decode", roofline.decode, roofline.decode.mbu if roofline.decode else None),
            ("prefill", roofline.prefill, None),
        )
        if p is not None
        and p.intensity_flop_per_byte is not None
        and finite(p.intensity_flop_per_byte, True)
        and finite(p.achieved_tflops, True)
    ]
    if not pts:
        return None
    plot = Plot("roof", height=3.6)
    ax = plot.axes[0]
    peaks = roofline.peaks
    if peaks:
        _roof(ax, peaks, [x for _, x, _, _, _ in pts])
    for phase, x, y, mbu, mfu in pts:
        extra = (f", MBU {mbu:.1%}" if mbu is not None else "") + (
            f", MFU {mfu:.2%}" if mfu is not None else ""
        )
        plot.series(
            ax,
            [x],
            [y],
            [f"{phase}: {x:.3g} FLOP/byte, {y:.4g} TFLOP/s{extra}"],
            label=phase,
            log_x=True,
            log_y=True,
            linestyle="none",
            markersize=8,
            marker="o" if phase == "decode" else "D",
            color="#d93025" if phase == "decode" else "#1a73e8",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(
        "Roofline: this run on the device's roof"
        if peaks
        else "Roofline points (the device's peaks are unknown: run `loadtest calibrate`)"
    )
    ax.legend(fontsize=8)
    return plot.svg()


def _roof(ax: Axes, peaks: Peaks, xs: list[float]) -> None:
    """The device's roof: the bandwidth slope up to the ridge, then the compute ceiling."""
    lo, hi = min(xs + [1.0]) / 4, max(xs + [1000.0]) * 4
    bw, top = peaks.bw_gb_s * 1e9, peaks.tflops * 1e12
    roof_x = [lo, top / bw, hi]
    ax.plot(
        roof_x,
        [min(top, bw * x) / 1e12 for x in roof_x],
        color="#444",
        lw=1.5,
        label=f"roof: {peaks.bw_gb_s:g} GB/s, {peaks.tflops:g} TFLOP/s",
    )
