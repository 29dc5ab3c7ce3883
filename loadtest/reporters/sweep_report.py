"""Sweep reports: the terminal table, ``sweep.md`` and ``sweep.html``, from sweep.json alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from loadtest.core import atomic
from loadtest.core.text import visible_doc
from loadtest.reporters import cost, html, sweep_plots
from loadtest.results.model import SweepDoc, SweepPoint

COLS = (
    "x",
    "status",
    "steady",
    "output_tokens_per_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p99_ms",
    "goodput_rps",
    "usd_per_million_output_tokens",
)
OPTIONAL = ("goodput_rps", "usd_per_million_output_tokens")  # shown where some point has it


# The terminal's headers: short, so the table fits 80 columns (latencies in ms, said in the title)
SHORT = {
    "output_tokens_per_s": "tok/s",
    "ttft_p50_ms": "TTFT p50",
    "ttft_p99_ms": "TTFT p99",
    "itl_p50_ms": "ITL p50",
    "itl_p99_ms": "ITL p99",
    "e2e_p99_ms": "E2E p99",
    "goodput_rps": "good/s",
    "usd_per_million_output_tokens": "$/M out",
}


def _short(v: object) -> str:
    """A figure in at most 6 characters or so: whole above 1,000, else 4 significant digits."""
    if isinstance(v, float):
        return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return _fmt(v)


def _fmt(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "NO"
    return "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def point_done_printer(console: Console) -> Callable[[int, int, float, SweepPoint], None]:
    """``on_point`` for run_sweep: one plain line a point (k/N, its time, the sweep's estimate),
    readable in a CI log as on a terminal."""
    import time

    started = time.monotonic()

    def done(k: int, n: int, seconds: float, row: SweepPoint) -> None:
        elapsed = time.monotonic() - started
        left = elapsed / k * (n - k)
        console.print(
            f"sweep: point {k}/{n} {row.params} {row.status} in {seconds:.0f} s; "
            f"elapsed {elapsed:.0f} s, about {left:.0f} s left",
            highlight=False,
        )

    return done


def render_terminal(doc: SweepDoc, console: Console) -> None:
    """A sweep's curve, knee and frontier (and the max-rate search's verdict) on the terminal."""
    doc = visible_doc(doc)  # outside text in it is shown, never obeyed
    table = Table(
        title=f"sweep over {doc.axis} ({doc.status}; latencies in ms)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    cols = _cols(doc)
    for col in cols:
        header = SHORT.get(col, col)
        # one-word headers never wrap; two-word ones may take two lines
        table.add_column(header, justify="right", min_width=max(len(w) for w in header.split()))
    for point in doc.curve:
        table.add_row(*(_short(sweep_plots.cell(point, k)) for k in cols))
    console.print(table)
    console.print(f"knee (steady points): {doc.knee}  frontier: {doc.frontier}")
    for caveat in doc.knee_caveats:
        console.print(f"  caveat: {caveat}", style="yellow")
    if doc.point_sizing:
        console.print(doc.point_sizing)
    if "usd_per_million_output_tokens" in cols:
        console.print(cost.cheapest_line(doc))
    if doc.max_rate:
        mr = doc.max_rate
        console.print(
            f"highest rate meeting the SLA: {mr.rate} req/s (first failing: {mr.first_failing_rate}, "
            f"tolerance {mr.tolerance:.0%})"
        )


def _cols(doc: SweepDoc) -> list[str]:
    return [
        k for k in COLS if k not in OPTIONAL or any(getattr(c, k) is not None for c in doc.curve)
    ]


def markdown(doc: SweepDoc) -> str:
    """sweep.md: the curve table, the knee and frontier, the max-rate verdict."""
    doc = visible_doc(doc)  # outside text in it is shown, never obeyed
    cols = _cols(doc)
    lines = [
        f"# Sweep over `{doc.axis}`",
        "",
        f"status: **{doc.status}**",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
    ]
    lines += [
        "| " + " | ".join(_fmt(sweep_plots.cell(c, k)) for k in cols) + " |" for c in doc.curve
    ]
    lines += [
        "",
        f"Knee (highest output tok/s ÷ p99 E2E, steady points only): **{doc.knee}**; frontier: {doc.frontier}",
    ]
    lines += [f"- caveat: {c}" for c in doc.knee_caveats]
    if "usd_per_million_output_tokens" in cols:
        lines += ["", cost.cheapest_line(doc) + "."]
    if doc.max_rate:
        mr = doc.max_rate
        lines += [
            "",
            f"Highest rate meeting the SLA: **{mr.rate} req/s** (first failing {mr.first_failing_rate}, "
            f"tolerance {mr.tolerance:.0%}).",
        ]
    return "\n".join(lines) + "\n"


def write(doc: SweepDoc, out: Path) -> list[Path]:
    """Write sweep.md, sweep.html and sweep_points.csv (every curve field, a point a row) next
    to sweep.json; returns their paths."""
    md, page, points = (Path(out) / n for n in ("sweep.md", "sweep.html", "sweep_points.csv"))
    atomic.write_text(md, markdown(doc))
    atomic.write_text(page, html.sweep_html(doc))
    curve = [c.view() for c in doc.curve]  # rows of the CSV written
    columns = list(dict.fromkeys(k for c in curve for k in c)) or ["x", "status"]
    atomic.write_csv(points, curve, columns)
    return [md, page, points]
