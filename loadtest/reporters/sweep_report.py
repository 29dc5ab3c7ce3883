"""Sweep reports: the terminal table, ``sweep.md`` and ``sweep.html``, from sweep.json alone."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from loadtest.core import atomic
from loadtest.reporters import html

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
)


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "NO"
    return "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def point_done_printer(console: Console):
    """``on_point`` for run_sweep: one plain line a point (k/N, its time, the sweep's estimate),
    readable in a CI log as on a terminal."""
    import time

    started = time.monotonic()

    def done(k: int, n: int, seconds: float, row) -> None:
        elapsed = time.monotonic() - started
        left = elapsed / k * (n - k)
        console.print(
            f"sweep: point {k}/{n} {row.params} {row.status} in {seconds:.0f} s; "
            f"elapsed {elapsed:.0f} s, about {left:.0f} s left",
            highlight=False,
        )

    return done


def render_terminal(doc: dict, console: Console) -> None:
    """A sweep's curve, knee and frontier (and the max-rate search's verdict) on the terminal."""
    table = Table(title=f"sweep over {doc['axis']} ({doc['status']})", title_justify="left")
    for c in COLS:
        table.add_column(c, justify="right")
    for c in doc["curve"]:
        table.add_row(*(_fmt(c.get(k)) for k in COLS))
    console.print(table)
    console.print(f"knee (steady points): {doc['knee']}  frontier: {doc['frontier']}")
    if doc.get("point_sizing"):
        console.print(doc["point_sizing"])
    if doc.get("max_rate"):
        mr = doc["max_rate"]
        console.print(
            f"highest rate meeting the SLA: {mr['rate']} req/s (first failing: {mr['first_failing_rate']}, "
            f"tolerance {mr['tolerance']:.0%})"
        )


def markdown(doc: dict) -> str:
    """sweep.md: the curve table, the knee and frontier, the max-rate verdict."""
    lines = [
        f"# Sweep over `{doc['axis']}`",
        "",
        f"status: **{doc['status']}**",
        "",
        "| " + " | ".join(COLS) + " |",
        "|" + "---|" * len(COLS),
    ]
    lines += ["| " + " | ".join(_fmt(c.get(k)) for k in COLS) + " |" for c in doc["curve"]]
    lines += [
        "",
        f"Knee (highest output tok/s ÷ p99 E2E, steady points only): **{doc['knee']}**; frontier: {doc['frontier']}",
    ]
    if doc.get("max_rate"):
        mr = doc["max_rate"]
        lines += [
            "",
            f"Highest rate meeting the SLA: **{mr['rate']} req/s** (first failing {mr['first_failing_rate']}, "
            f"tolerance {mr['tolerance']:.0%}).",
        ]
    return "\n".join(lines) + "\n"


def write(doc: dict, out: Path) -> list[Path]:
    """Write sweep.md and sweep.html next to sweep.json; returns their paths."""
    md, page = Path(out) / "sweep.md", Path(out) / "sweep.html"
    atomic.write_text(md, markdown(doc))
    atomic.write_text(page, html.sweep_html(doc))
    return [md, page]
