"""``loadtest plan``: before a run, whether its window can decide its SLA checks, how long it
would need to, and, against a baseline, the smallest change a gate could tell from noise."""

from __future__ import annotations

from pathlib import Path

import typer

from loadtest.cli import options
from loadtest.cli.common import load_planned, say_environment_settings, usage_error
from loadtest.core import exit_codes


def plan(
    ctx: typer.Context,
    scenario: Path = typer.Argument(..., help="Scenario file."),
    set_: options.Set = None,
    baseline: list[Path] | None = typer.Option(
        None,
        "--baseline",
        help="A baseline run or repeat directory (repeatable): the smallest change a candidate "
        "of its length and replicates can resolve against it.",
    ),
    repeat: int = typer.Option(
        1, "--repeat", min=1, help="Replicates pooled (run --repeat N): their samples add up."
    ),
    metric: options.Metric = None,
    min_effect: options.MinEffect = 0.05,
    confidence: options.Confidence = 0.99,
) -> None:
    """How many requests and how long a window each SLA check needs to decide at its
    confidence, against what the scenario plans; with --baseline, the smallest regression a
    gate against it can resolve. Loads no model."""
    from loadtest.analysis.planning import detectable_pct, sla_needs
    from loadtest.cli.gating import metric_names
    from loadtest.results import runset

    say_environment_settings(ctx)
    loaded, planned = load_planned(scenario, set_ or [])
    typer.echo(f"{scenario}: {describe_window(planned)}")
    sla = loaded.scenario.sla
    if sla is None:
        typer.echo("no sla: block: nothing to decide")
    else:
        pooled = f", pooled over {repeat} replicates" if repeat > 1 else ""
        typer.echo(f"SLA checks, at {sla.confidence:.0%} confidence{pooled}:")
        for need in sla_needs(sla, planned, repeat):
            typer.echo(f"  {need.line()}")
    if not baseline:
        raise typer.Exit(exit_codes.OK)
    from loadtest.analysis.regression import default_metrics

    names = metric_names(metric)
    try:
        runs = [m for b in baseline for m in runset.load(b).measured]
    except runset.RunSetError as exc:
        usage_error(str(exc))
    if not runs:
        usage_error(f"{', '.join(map(str, baseline))}: nothing measured")
    typer.echo(
        f"against {', '.join(map(str, baseline))} ({len(runs)} runs), at {confidence:.0%} "
        f"confidence, minimum effect {min_effect:.0%}:"
    )
    for name, pct in detectable_pct(runs, names or default_metrics(runs), confidence).items():
        typer.echo(f"  {name}: {detectable_line(pct, min_effect)}")
    raise typer.Exit(exit_codes.OK)


def describe_window(planned) -> str:
    """The measured window a plan holds, in a line."""
    from loadtest.analysis.planning import planned_samples, window_seconds

    counts, window_s = planned_samples(planned), window_seconds(planned)
    if not counts:
        return "a closed loop: how many requests the window holds is up to the server"
    span = f"a {window_s:g} s window" if window_s else "a window"
    rate = f" ({counts['requests'] / window_s:.3g} req/s)" if window_s else ""
    return (
        f"{span} of {counts['requests']:,} measured requests{rate}, at most "
        f"{counts['gaps']:,} gaps between tokens"
    )


def detectable_line(pct: float | None, min_effect: float) -> str:
    if pct is None:
        return "too few intervals in the baseline to tell"
    if pct <= 100 * min_effect:
        return f"resolves changes of {pct:.1f}%: a PASS is in reach"
    return (
        f"resolves changes of {pct:.1f}%, over the {min_effect:.0%} minimum effect: a gate of "
        "this shape says INCONCLUSIVE unless the change is large (more replicates or longer "
        f"runs, or --min-effect {pct / 100:.2g})"
    )
