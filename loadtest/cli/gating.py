"""``loadtest gate`` and ``loadtest compare``: a saved run judged against an SLA and baselines
(the exit code a release pipeline branches on), and two runs side by side."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from loadtest.cli import options
from loadtest.core import exit_codes
from loadtest.reporters.console import make_console, styled, working

if TYPE_CHECKING:
    from loadtest.config.loading import LoadedScenario
    from loadtest.config.objectives import SlaObjectives


def gate_spec(sla: Path | None, loaded: LoadedScenario | None = None) -> SlaObjectives | None:
    """The SLA (``config.objectives.Sla``) from a file, else from the scenario, else None."""
    from loadtest.analysis import gate
    from loadtest.core.errors import ScenarioError

    try:
        if sla:
            return gate.load_sla(sla)
    except ScenarioError as exc:
        for line in exc.problems:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(exit_codes.USAGE) from None
    if loaded is not None and loaded.scenario.sla:
        return loaded.scenario.sla
    return None


def gate_and_report(
    run_dir: Path,
    spec,
    baselines: list[Path],
    junit: Path | None,
    markdown_out: Path | None,
    console,
    metrics=None,
    min_effect: float = 0.05,
    confidence: float = 0.99,
) -> int:
    """Judge, print the verdict tables, write JUnit/Markdown; the gate's exit code."""
    import os

    from loadtest.analysis import gate
    from loadtest.analysis.cost import cost_change
    from loadtest.analysis.sla import overall as sla_overall
    from loadtest.core import atomic
    from loadtest.reporters import terminal
    from loadtest.results import runset
    from loadtest.results.model import Verdict

    try:
        with working(f"reading {run_dir} and {len(baselines)} baseline(s)"):
            run = runset.load(run_dir)
            bases = [runset.load(b) for b in baselines]
        with working(
            f"judging {len(run.results)} run(s)"
            + (
                f" against {sum(len(b.results) for b in bases)} baseline run(s): a bootstrap of "
                "their intervals"
                if bases
                else ""
            )
        ):
            result = gate.gate(
                run,
                spec,
                bases,
                metrics=metrics,
                min_effect=min_effect,
                confidence=confidence,
            )
    except runset.RunSetError as exc:
        typer.echo(f"error: {exc}", err=True)
        return exit_codes.USAGE
    if result.checks:
        verdict = sla_overall(result.checks)
        terminal.render_sla(Verdict(verdict=verdict, checks=result.checks), console)
    terminal.render_regression(result.regression, console)
    cost = cost_change([m for b in bases for m in b.measured], run.measured) if bases else None
    if cost is not None:
        console.print(f"baseline -> run: {cost.line()}", highlight=False)
    for reason in result.reasons:
        console.print(f"run {result.status}: {reason}", style="yellow")
    for warning in result.warnings:
        console.print(f"warning: {warning}", style="yellow")
    style = terminal.VERDICT_STYLE[result.verdict]
    console.print(styled("gate: ", (result.verdict, style)))
    terminal.render_reasons(f"gate {result.verdict}", result.verdict_reasons, console)
    name = run_dir.name
    if junit:
        atomic.write_text(junit, gate.junit_xml(result, name))
    summary = markdown_out or (Path(step) if (step := os.getenv("GITHUB_STEP_SUMMARY")) else None)
    if summary:
        with open(summary, "a", encoding="utf-8") as f:  # step summaries accumulate
            f.write(gate.markdown(result, name))
            if cost is not None:
                f.write(f"\nBaseline -> run: {cost.line()}.\n")
    return exit_codes.for_gate(result.status, result.verdict)


def metric_names(metric: list[str] | None) -> tuple[str, ...] | None:
    """The --metric names, checked (exit 2 for one not comparable); None when none is given."""
    from loadtest.analysis import regression

    if not metric:
        return None
    names = tuple(metric)
    for name in names:
        try:
            regression.parse_metric(name)
        except ValueError as exc:
            typer.echo(f"error: --metric {exc}", err=True)
            raise typer.Exit(exit_codes.USAGE) from None
    return names


def gate(
    run_dir: Path = typer.Argument(
        ..., help="A run directory (metrics.json) or repeat directory (repeat.json)."
    ),
    sla: Path | None = typer.Option(
        None, "--sla", help="SLA file: the mapping of a scenario's sla: block."
    ),
    baseline: list[Path] | None = typer.Option(
        None,
        "--baseline",
        help="Baseline run or repeat directory (repeatable: "
        "replicates); checks each metric for a regression.",
    ),
    metric: options.Metric = None,
    min_effect: options.MinEffect = 0.05,
    confidence: options.Confidence = 0.99,
    junit: Path | None = typer.Option(
        None, "--junit", help="Write JUnit XML here (one test case per check)."
    ),
    markdown_out: Path | None = typer.Option(
        None,
        "--markdown",
        help="Write a Markdown summary here (default: $GITHUB_STEP_SUMMARY when set).",
    ),
) -> None:
    """Judge a saved run against an SLA and/or baselines: exit 0 PASS, 1 FAIL, 3 INCONCLUSIVE, 4 the run failed."""
    if not sla and not baseline:
        typer.echo("error: give --sla FILE, --baseline DIR, or both", err=True)
        raise typer.Exit(exit_codes.USAGE)
    names = metric_names(metric)
    raise typer.Exit(
        gate_and_report(
            run_dir,
            gate_spec(sla),
            baseline or [],
            junit,
            markdown_out,
            make_console(),
            names,
            min_effect,
            confidence,
        )
    )


def compare(
    run_a: Path = typer.Argument(..., help="Run or repeat directory (the reference)."),
    run_b: Path = typer.Argument(..., help="Run or repeat directory (compared with A)."),
    metric: options.Metric = None,
    confidence: options.Confidence = 0.95,
    as_json: bool = typer.Option(
        False, "--json", help="Print the comparison as JSON (and write no HTML)."
    ),
    html_out: Path | None = typer.Option(
        None,
        "--html",
        help="Where to write the HTML overlay (default: compare-vs-<A>.html in B's directory).",
    ),
    no_report: bool = typer.Option(False, "--no-report", help="Write no HTML."),
) -> None:
    """Side by side: each headline metric of B against A, the change and its bootstrap interval;
    compare-vs-<A>.html overlays the two runs' percentile curves."""
    from loadtest.analysis import gate, regression
    from loadtest.analysis.cost import cost_change
    from loadtest.core import atomic
    from loadtest.reporters import html, terminal
    from loadtest.results import runset

    names = metric_names(metric) or regression.DEFAULT_METRICS
    try:
        a, b = runset.load(run_a), runset.load(run_b)
    except runset.RunSetError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exit_codes.USAGE) from None
    if not a.measured or not b.measured:
        typer.echo(f"error: {run_a if not a.measured else run_b}: nothing measured", err=True)
        raise typer.Exit(exit_codes.USAGE)
    with working(f"comparing {len(b.measured)} run(s) with {len(a.measured)}: a bootstrap"):
        checks = regression.as_checks(
            regression.compare(a.measured, b.measured, names, confidence=confidence)
        )
    cost = cost_change(a.measured, b.measured)
    if as_json:
        metrics = [c.view() for c in checks]
        doc = {"a": str(run_a), "b": str(run_b), "confidence": confidence, "metrics": metrics}
        if cost is not None:
            doc["cost"] = cost.view()
        typer.echo(json.dumps(doc, indent=2))
        raise typer.Exit(exit_codes.OK)
    console = make_console()
    terminal.render_compare(checks, a.name, b.name, confidence, console)
    if cost is not None:
        console.print(cost.line(), highlight=False)
    warnings = list(gate.scenario_differences(a.measured[0], b.measured[0]))
    warnings += [
        f"{rs.name}: not every run is valid ({', '.join(m.status for m in rs.results)})"
        for rs in (a, b)
        if any(m.status != "ok" for m in rs.results)
    ]
    for w in warnings:
        console.print(f"warning: {w}", style="yellow")
    if not no_report:
        pooled = [
            {k: h.encode() for k, h in (rs.pooled().histograms or {}).items()} for rs in (a, b)
        ]
        page = html.compare_html(
            a.name, b.name, checks, confidence, (pooled[0], pooled[1]), warnings
        )
        target = html_out or Path(run_b) / f"compare-vs-{safe_name(a.name)}.html"
        atomic.write_text(target, page)
        console.print(f"report: {target}", highlight=False)
    raise typer.Exit(exit_codes.OK)


def safe_name(name: str) -> str:
    """A directory name made safe for a file name: letters, digits, ``.-_`` only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "A"
