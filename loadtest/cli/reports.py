"""``loadtest report``: re-render a saved run, repeat or sweep from its JSON alone; and the
reports every run writes beside its result (a report that fails is a warning, never a lost run)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from loadtest.cli.common import error, usage_error
from loadtest.core import exit_codes
from loadtest.reporters.console import make_console

if TYPE_CHECKING:
    from loadtest.results.model import RepeatDoc, RunMetrics


def exit_code(doc: RunMetrics | RepeatDoc) -> int:
    """For a metrics.json or a repeat.json (its pooled status and SLA verdict)."""
    from loadtest.results.model import RunMetrics  # lazy: --version needs none of it

    verdict = None if doc.sla is None else doc.sla.verdict
    if isinstance(doc, RunMetrics) and doc.harness is not None and doc.harness.internal_error:
        return exit_codes.INTERNAL  # a bug in loadtest stopped it: not the system's failure
    interrupted_by = doc.interrupted_by if isinstance(doc, RunMetrics) else None
    return exit_codes.for_result(doc.status, verdict, interrupted_by)


def report(
    run_dir: Path = typer.Argument(
        ..., help="A run (metrics.json), repeat (repeat.json) or sweep (sweep.json) directory."
    ),
    fmt: str = typer.Option(
        "reports",
        "--format",
        help="reports: report.md, report.html and the rest; vllm: vllm-bench-serve.json in "
        "`vllm bench serve`'s layout, beside each run's metrics.json.",
    ),
) -> None:
    """Re-render a saved run (report.md, report.html), repeat (repeat.html and each replicate's)
    or sweep (sweep.md, sweep.html) from its JSON alone; or write it in another tool's layout."""
    from loadtest.reporters import sweep_report, terminal
    from loadtest.results.model import ResultReadError, read_repeat, read_run, read_sweep

    if fmt not in ("reports", "vllm"):
        usage_error(f"--format {fmt}: reports or vllm")
    try:  # through the typed readers: a broken or hostile file is refused, never half-read
        sweep = read_sweep(run_dir / "sweep.json") if (run_dir / "sweep.json").exists() else None
        repeat = (
            read_repeat(run_dir / "repeat.json") if (run_dir / "repeat.json").exists() else None
        )
    except ResultReadError as exc:
        usage_error(str(exc))
    if fmt == "vllm":
        runs = (
            [run_dir / p.run_dir for p in sweep.points if p.metrics is not None]
            if sweep is not None
            else [run_dir / d for d in repeat.runs]
            if repeat is not None
            else [run_dir]
        )
        typer.echo("vllm layout: " + ", ".join(str(_vllm_file(d)) for d in runs))
        raise typer.Exit(exit_codes.OK)
    if sweep is not None:
        sweep_report.render_terminal(sweep, make_console())
        typer.echo("report: " + ", ".join(str(p) for p in sweep_report.write(sweep, run_dir)))
        raise typer.Exit(exit_codes.OK)
    if repeat is not None:
        written = [p for d in repeat.runs for p in write_reports(run_dir / d)]
        written += write_repeat_report(run_dir, repeat)
        terminal.render_repeat(repeat, make_console())
        typer.echo("report: " + ", ".join(str(p) for p in written))
        raise typer.Exit(exit_code(repeat))

    try:
        metrics = read_run(run_dir / "metrics.json")
    except ResultReadError as exc:
        usage_error(str(exc))
    terminal.render(metrics)
    written = _write_each(metrics, run_dir)
    typer.echo("report: " + ", ".join(str(p) for p in written))
    raise typer.Exit(exit_code(metrics))


def write_reports(run_dir: Path) -> list[Path]:
    """report.md and report.html beside a run's metrics.json. The result is already written:
    a report that cannot be rendered is a warning, never a lost run."""
    from loadtest.results.model import ResultReadError, read_run

    try:
        metrics = read_run(run_dir / "metrics.json")
    except (ResultReadError, OSError, ValueError) as exc:
        error(f"{run_dir}: the report could not be written ({exc}); metrics.json is intact")
        return []
    return _write_each(metrics, run_dir)


def _write_each(metrics: RunMetrics, run_dir: Path) -> list[Path]:
    """report.md, report.html, timeseries.csv and histograms.hlog, each on its own: one that
    cannot be written (a full disk, a renderer's error) is named, and the others are tried.
    Returns the files written."""
    from loadtest.reporters import exports, html, markdown

    files = [
        ("report.md", lambda d: markdown.write(metrics, d)),
        ("report.html", lambda d: html.write_run(metrics, d)),
        *exports.files(metrics),
    ]
    written, failed = [], []
    for name, write in files:
        try:
            write(run_dir)
        except (OSError, ValueError, ImportError) as exc:
            failed.append(f"{name} ({getattr(exc, 'strerror', None) or exc})")
        else:
            written.append(run_dir / name)
    if failed:
        kept = ", ".join(p.name for p in written) or "none"
        error(
            f"{run_dir}: could not write {', '.join(failed)}; written: {kept}; "
            "metrics.json is intact"
        )
    return written


def write_repeat_report(out: Path, doc: RepeatDoc) -> list[Path]:
    """repeat.html beside repeat.json: median and spread, replicates' percentiles overlaid."""
    from loadtest.core import atomic
    from loadtest.reporters import html
    from loadtest.results.model import ResultReadError, read_run

    try:
        curves = [(d, read_run(out / d / "metrics.json").histograms or {}) for d in doc.runs]
        atomic.write_text(out / "repeat.html", html.repeat_html(doc, curves))
        return [out / "repeat.html"]
    except (ResultReadError, OSError, ValueError, ImportError) as exc:
        error(f"{out}: repeat.html could not be written ({exc}); repeat.json is intact")
        return []


def _vllm_file(run_dir: Path) -> Path:
    """The run in ``vllm bench serve``'s layout, beside its metrics.json (exit 2 if unreadable)."""
    from loadtest.core import atomic
    from loadtest.reporters.vllm_layout import FILE, vllm_layout
    from loadtest.results.model import ResultReadError, read_run

    try:
        metrics = read_run(run_dir / "metrics.json")
    except ResultReadError as exc:
        usage_error(str(exc))
    atomic.write_json(run_dir / FILE, vllm_layout(metrics))
    return run_dir / FILE
