"""A sweep's plots: throughput and p99 latencies against the swept axis, and the
throughput-latency frontier; each point marked steady, unsteady (overloaded) or invalid."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from loadtest.core.json_types import JsonValue
from loadtest.reporters.plots import COLORS, Plot, finite
from loadtest.results.model import Cheapest, CurvePoint

if TYPE_CHECKING:
    from matplotlib.axes import Axes

STATUS_STYLE = {  # sweep points: marker, colour, label
    "steady": ("o", "#1a73e8", "steady"),
    "unsteady": ("^", "#e37400", "unsteady (overloaded)"),
    "unknown": ("s", "#80868b", "stability unknown"),
    "invalid": ("X", "#b3261e", "invalid"),
}


def point_kind(c: CurvePoint) -> str:
    """A sweep point as the plots mark it: steady, unsteady (overloaded), unknown (too little
    to tell either way) or invalid."""
    if c.status not in ("ok", None):
        return "invalid"
    return {True: "steady", False: "unsteady", None: "unknown"}[c.steady]


def cell(point: CurvePoint, col: str) -> object:
    """A point's value for a column; stability unknown (too little to tell) said as such."""
    if col == "steady" and point.steady is None and point.status in ("ok", "invalid"):
        return "unknown"
    return getattr(point, col)


Tip = Callable[[CurvePoint], str]  # a point's hover text


def _sweep_series(
    plot: Plot,
    ax: Axes,
    curve: list[CurvePoint],
    xkey: str,
    ykey: str,
    label: str | None,
    fmt: Callable[[CurvePoint], str],
    log_y: bool = False,
    color: str | None = None,
) -> None:
    """One curve: a thin line through every point, markers by the point's kind. ``color``: the
    curve's own colour, when several share a plot; its line then carries ``label`` and its steady
    markers that colour (unsteady and invalid keep their kind's). Without it, the kinds make the
    legend."""
    xs = [getattr(c, xkey) for c in curve]
    ys = [getattr(c, ykey) for c in curve]
    ok = [(x, y) for x, y in zip(xs, ys) if finite(x) and finite(y, log_y)]
    if ok:
        ax.plot(*zip(*ok), color=color or "#888", lw=1, alpha=0.6, label=label if color else None)
    for kind, (marker, kcolor, klabel) in STATUS_STYLE.items():
        sel = [c for c in curve if point_kind(c) == kind]
        plot.series(
            ax,
            [getattr(c, xkey) for c in sel],
            [getattr(c, ykey) for c in sel],
            [fmt(c) for c in sel],
            label=None if color else klabel,
            log_y=log_y,
            linestyle="none",
            marker=marker,
            markersize=6,
            color=color if color and kind == "steady" else kcolor,
        )


def sweep_plots(
    curve: list[CurvePoint], axis: str, knee: JsonValue, cheapest: Cheapest | None = None
) -> list[tuple[str, str]]:
    """Throughput and p99 latencies against the swept axis, the cost where priced, and the
    throughput-latency frontier; points marked steady / unsteady / invalid, the knee drawn
    where there is one."""

    def tip(c: CurvePoint) -> str:
        return (
            f"{axis}={c.x} ({point_kind(c)}): {c.output_tokens_per_s or 0:.4g} tok/s, "
            f"TTFT p99 {c.ttft_p99_ms or 0:.4g} ms, ITL p99 {c.itl_p99_ms or 0:.4g} ms, "
            f"E2E p99 {c.e2e_p99_ms or 0:.4g} ms"
        )

    if not any(finite(c.output_tokens_per_s) for c in curve):
        return []
    out = [
        ("Throughput", _throughput(curve, axis, knee, tip)),
        ("Latency", _latencies(curve, axis, knee, tip)),
    ]
    if any(finite(c.usd_per_million_output_tokens, True) for c in curve):
        out.append(("Cost", _cost(curve, axis, cheapest, tip)))
    if any(finite(c.e2e_p99_ms) for c in curve):
        plot = Plot("sw-front")
        ax = plot.axes[0]
        _sweep_series(plot, ax, curve, "e2e_p99_ms", "output_tokens_per_s", None, tip)
        ax.set_xlabel("p99 end-to-end latency (ms)")
        ax.set_ylabel("output tok/s")
        ax.set_title("Throughput-latency frontier")
        ax.legend(fontsize=8)
        out.append(("Frontier", plot.svg()))
    return out


def _throughput(curve: list[CurvePoint], axis: str, knee: JsonValue, tip: Tip) -> str:
    plot = Plot("sw-tput")
    ax = plot.axes[0]
    _sweep_series(plot, ax, curve, "x", "output_tokens_per_s", "output tok/s", tip)
    if knee is not None:
        ax.axvline(knee, color="grey", linestyle="--", label=f"knee ({knee})")
    ax.set_xlabel(axis)
    ax.set_ylabel("output tok/s")
    ax.set_title(f"Throughput vs {axis}")
    ax.legend(fontsize=8)
    return plot.svg()


def _cost(curve: list[CurvePoint], axis: str, cheapest: Cheapest | None, tip: Tip) -> str:
    """The cost curve: the estimated cost per million output tokens at each point, on the
    latency curve's axis; the points that fail their SLA ringed, the cheapest that meets it
    drawn."""
    plot = Plot("sw-cost")
    ax = plot.axes[0]
    _sweep_series(plot, ax, curve, "x", "usd_per_million_output_tokens", None, tip, True)
    failing = [
        c for c in curve if c.sla == "FAIL" and finite(c.usd_per_million_output_tokens, True)
    ]
    if failing:
        ax.plot(
            [c.x for c in failing], [c.usd_per_million_output_tokens for c in failing],
            linestyle="none", marker="o", markersize=12, markerfacecolor="none",
            markeredgecolor="#b3261e", label="fails the SLA",
        )  # fmt: skip
    if cheapest is not None:
        ax.axvline(
            cheapest.x, color="#188038", linestyle="--",
            label=f"cheapest meeting the SLA ({cheapest.x}: ${cheapest.usd_per_million_output_tokens:.4g})"
            if "SLA" in cheapest.among else f"cheapest ({cheapest.x})",
        )  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel(axis)
    ax.set_ylabel("USD per million output tokens")
    ax.set_title(f"Cost (estimate) vs {axis}")
    ax.legend(fontsize=8)
    return plot.svg()


def _latencies(curve: list[CurvePoint], axis: str, knee: JsonValue, tip: Tip) -> str:
    plot = Plot("sw-lat")
    ax = plot.axes[0]
    for key in ("ttft_p99_ms", "itl_p99_ms", "e2e_p99_ms"):
        label = key.replace("_ms", "").replace("_", " ")
        color = COLORS[key.split("_")[0]]
        _sweep_series(plot, ax, curve, "x", key, label, tip, True, color)
    for kind, (marker, kcolor, klabel) in list(STATUS_STYLE.items())[1:]:
        if any(point_kind(c) == kind for c in curve):
            ax.plot([], [], linestyle="none", marker=marker, color=kcolor, label=klabel)
    if knee is not None:
        ax.axvline(knee, color="grey", linestyle="--")
    ax.set_yscale("log")
    ax.set_xlabel(axis)
    ax.set_ylabel("ms")
    ax.set_title(f"p99 latencies vs {axis}")
    ax.legend(fontsize=8)
    return plot.svg()
