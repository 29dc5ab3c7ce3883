"""``loadtest sweep``: the scenario at several settings with the model loaded once (a grid of
parameters, or a search for the highest rate that meets the SLA), and its curve report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from loadtest.cli import options
from loadtest.cli.common import claim, load, run_async, say_environment_settings, usage_error
from loadtest.core import exit_codes
from loadtest.reporters.console import make_console, styled

if TYPE_CHECKING:
    from rich.console import Console

    from loadtest.results.model import SweepDoc
    from loadtest.session import Session


def sweep(
    ctx: typer.Context,
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    batch_sizes: str | None = typer.Option(
        None, "--batch-sizes", help="backend.max_batch_size values: 1,2,4,8"
    ),
    rates: str | None = typer.Option(
        None, "--rates", help="load.arrival.rate values (req/s): 1,2,5"
    ),
    concurrency: str | None = typer.Option(
        None, "--concurrency", help="load.arrival.users values: 1,4,16"
    ),
    param: list[str] | None = typer.Option(
        None,
        "--param",
        help="Any field: dotted.key=v1,v2,... (repeatable: a grid; "
        "key1,key2=v1,v2 ties two fields to the same values).",
    ),
    find_max_rate: bool = typer.Option(
        False, "--find-max-rate", help="Search the highest rate that meets the SLA."
    ),
    tolerance: float = typer.Option(
        0.05, "--tolerance", help="--find-max-rate: relative width of the final bracket."
    ),
    min_goodput: float | None = typer.Option(
        None,
        "--min-goodput",
        min=0.0,
        max=1.0,
        help="--find-max-rate: a rate meets only when at least this fraction of its requests "
        "met the scenario's goodput objectives (and the SLA, if it has one).",
    ),
    max_point_duration: str = typer.Option(
        "10m",
        "--max-point-duration",
        help="--find-max-rate: the longest measured window a point may be lengthened to "
        "when its SLA checks need more samples.",
    ),
    stop_at_oom: bool = typer.Option(
        False, "--stop-at-oom", help="End the sweep cleanly at the first CUDA OOM point."
    ),
    batches_per_point: int = typer.Option(
        8,
        "--batches-per-point",
        min=0,
        help="Offline batch-size sweeps (burst arrival): full batches measured per point "
        "(load.requests = N x batch size); 0 keeps the scenario's request count.",
    ),
    out: options.Out = None,
    set_: options.Set = None,
    workers: options.Workers = None,
    ray: options.Ray = None,
    metrics_port: options.MetricsPort = None,
    metrics_bind: options.MetricsBind = None,
    otel: options.Otel = False,
    overwrite: options.Overwrite = False,
    quiet: options.Quiet = False,
) -> None:
    """Run the scenario at several settings (model loaded once): curves, frontier, knee, sweep.json."""
    from loadtest import sweep as sweeps
    from loadtest.core.errors import ScenarioError
    from loadtest.reporters import sweep_report

    # every point's overrides: --workers, --ray, --metrics-port and --otel apply to each
    say_environment_settings(ctx)
    set_ = (set_ or []) + options.workers_override(workers, ray, metrics_port, otel, metrics_bind)
    loaded = load(scenario, set_)
    try:
        axes = sweeps.parse_axes(batch_sizes, rates, concurrency, param or [])
        if not axes and not find_max_rate:
            raise ScenarioError(
                ["sweep: give --batch-sizes, --rates, --concurrency, --param or --find-max-rate"]
            )
    except ScenarioError as exc:
        usage_error(*exc.problems)
    max_point_s = _seconds("--max-point-duration", max_point_duration)
    out = claim(out, loaded, overwrite, "-sweep")
    console = make_console()
    session = _session(quiet, console)

    async def go() -> SweepDoc:
        try:
            if find_max_rate:
                return await sweeps.find_max_rate(
                    scenario, set_, out, session, tolerance,
                    max_point_s=max_point_s, min_goodput=min_goodput,
                )  # fmt: skip
            return (
                await sweeps.run_sweep(
                    scenario,
                    set_,
                    axes,
                    out,
                    session,
                    stop_at_oom,
                    batches_per_point=batches_per_point or None,
                    on_point=sweep_report.point_done_printer(make_console(stderr=True)),
                )  # fmt: skip
            ).doc
        finally:
            await session.close()

    doc = run_async(go)
    sweep_report.render_terminal(doc, console)
    paths = sweep_report.write(doc, out)
    console.print(f"sweep: {out / 'sweep.json'}  report: {', '.join(str(p) for p in paths)}")
    raise typer.Exit(_exit_code(doc, find_max_rate, session.interrupted_by, console))


def _seconds(flag: str, text: str) -> float:
    from loadtest.core.units import parse_duration_ns

    try:
        seconds = parse_duration_ns(text) / 1e9
        if seconds <= 0:
            raise ValueError("must be positive")
    except ValueError as exc:
        usage_error(f"{flag} {text}: {exc}")
    return seconds


def _session(quiet: bool, console: Console) -> Session:
    from loadtest.core.clock import MonotonicClock
    from loadtest.reporters.progress import choose as progress_for
    from loadtest.session import Session

    return Session(
        MonotonicClock(), progress=progress_for(quiet, console.is_terminal), handle_signals=True
    )


def _exit_code(
    doc: SweepDoc, find_max_rate: bool, interrupted_by: str | None, console: Console
) -> int:
    """A sweep's exit code: interrupted, no rate met the SLA, no verdict, or no valid point."""
    if doc.status == "interrupted":
        return exit_codes.SIGNALS.get(interrupted_by or "", exit_codes.INTERRUPTED)
    if find_max_rate and doc.status == "no_rate_meets_sla":
        return exit_codes.SLA_FAILED
    if find_max_rate and doc.status != "ok":
        evidence = doc.max_rate.evidence if doc.max_rate else ""
        console.print(styled(("no verdict: ", "yellow"), evidence))
        return exit_codes.INVALID
    if doc.status == "invalid":  # no point measured anything trustworthy
        console.print(styled(("invalid sweep: ", "yellow"), "no point's run was valid"))
        return exit_codes.INVALID
    return exit_codes.OK
