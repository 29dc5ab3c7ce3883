"""The command line: a thin typer layer over ``loadtest.session``.

Exit codes: 0 ok (and SLA passed, if any); 1 SLA failed; 2 usage or scenario error; 3 run
invalid or SLA inconclusive; 4 run failed (backend crashed); 130 interrupted (partial result written).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="LLM inference latency load tester.")

EXIT_OK, EXIT_SLA_FAIL, EXIT_USAGE, EXIT_INVALID, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130


def exit_code(metrics: dict) -> int:
    status = metrics["status"]
    if status == "interrupted":
        return EXIT_INTERRUPTED
    if status == "failed":
        return EXIT_FAILED
    if status == "invalid":
        return EXIT_INVALID
    verdict = (metrics.get("sla") or {}).get("verdict")
    return {"FAIL": EXIT_SLA_FAIL, "INCONCLUSIVE": EXIT_INVALID}.get(verdict, EXIT_OK)


def _load(path: Path, overrides: list[str]):
    from .errors import ScenarioError
    from .scenario_file import load_scenario

    try:
        return load_scenario(path, overrides)
    except ScenarioError as exc:
        for line in exc.problems:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(EXIT_USAGE)


@app.command()
def run(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Run directory (exactly this path)."),
    set_: List[str] = typer.Option([], "--set", help="Override a field: dotted.key=value (repeatable)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live progress display."),
    as_json: bool = typer.Option(False, "--json", help="Print metrics.json to stdout instead of tables."),
) -> None:
    """Run one load test and write its run directory (metrics.json)."""
    loaded = _load(scenario, set_)
    from rich.console import Console

    from .errors import LoadtestError, ScenarioError
    from .progress import live_progress
    from .reporters import terminal
    from .session import run_scenario

    console = Console(stderr=as_json)
    try:
        result = run_scenario(loaded, out, progress=None if quiet or not console.is_terminal else live_progress(),
                              handle_signals=True)
    except LoadtestError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE if isinstance(exc, ScenarioError) else EXIT_FAILED)
    if as_json:
        typer.echo(json.dumps(result.metrics, indent=2))
    else:
        terminal.render(result.metrics, console)
        console.print(f"results: {result.out_dir / 'metrics.json'}")
    raise typer.Exit(exit_code(result.metrics))


@app.command()
def sweep(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes", help="backend.max_batch_size values: 1,2,4,8"),
    rates: Optional[str] = typer.Option(None, "--rates", help="load.arrival.rate values (req/s): 1,2,5"),
    concurrency: Optional[str] = typer.Option(None, "--concurrency", help="load.arrival.users values: 1,4,16"),
    param: List[str] = typer.Option([], "--param", help="Any field: dotted.key=v1,v2,... (repeatable: a grid; "
                                                        "key1,key2=v1,v2 ties two fields to the same values)."),
    find_max_rate: bool = typer.Option(False, "--find-max-rate", help="Search the highest rate that meets the SLA."),
    tolerance: float = typer.Option(0.05, "--tolerance", help="--find-max-rate: relative width of the final bracket."),
    stop_at_oom: bool = typer.Option(False, "--stop-at-oom", help="End the sweep cleanly at the first CUDA OOM point."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Sweep directory (exactly this path)."),
    set_: List[str] = typer.Option([], "--set", help="Override a field for every point: dotted.key=value."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live progress display."),
) -> None:
    """Run the scenario at several settings (model loaded once): curves, frontier, knee, sweep.json."""
    import asyncio

    from rich.console import Console

    from .clock import MonotonicClock
    from .errors import LoadtestError, ScenarioError
    from .progress import live_progress
    from .reporters import sweep_report
    from . import sweep as sweeps
    from .session import Session, default_out_dir

    loaded = _load(scenario, set_)
    console = Console()
    out = out or default_out_dir(f"{loaded.scenario.name}-sweep")
    try:
        axes = sweeps.parse_axes(batch_sizes, rates, concurrency, param)
        if not axes and not find_max_rate:
            raise ScenarioError(["sweep: give --batch-sizes, --rates, --concurrency, --param or --find-max-rate"])
    except ScenarioError as exc:
        for line in exc.problems:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(EXIT_USAGE)

    async def go():
        session = Session(MonotonicClock(), progress=None if quiet or not console.is_terminal else live_progress(),
                          handle_signals=True)
        try:
            if find_max_rate:
                return await sweeps.find_max_rate(scenario, set_, out, session, tolerance)
            return (await sweeps.run_sweep(scenario, set_, axes, out, session, stop_at_oom)).doc
        finally:
            await session.close()

    try:
        doc = asyncio.run(go())
    except ScenarioError as exc:
        for line in exc.problems:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(EXIT_USAGE)
    except LoadtestError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_FAILED)
    sweep_report.render_terminal(doc, console)
    paths = sweep_report.write(doc, out)
    console.print(f"sweep: {out / 'sweep.json'}  report: {', '.join(str(p) for p in paths)}")
    if doc["status"] == "interrupted":
        raise typer.Exit(EXIT_INTERRUPTED)
    if find_max_rate and doc["status"] != "ok":
        raise typer.Exit(EXIT_SLA_FAIL)
    raise typer.Exit(EXIT_OK)


@app.command()
def validate(files: List[Path] = typer.Argument(..., help="Scenario files."),
             set_: List[str] = typer.Option([], "--set", help="Override a field: dotted.key=value.")) -> None:
    """Check scenario files without running anything (no model load, no GPU)."""
    from .errors import ScenarioError
    from .scenario_file import load_scenario

    bad = 0
    for f in files:
        try:
            load_scenario(f, set_)
            typer.echo(f"ok: {f}")
        except ScenarioError as exc:
            bad += 1
            for line in exc.problems:
                typer.echo(f"error: {line}", err=True)
    raise typer.Exit(EXIT_USAGE if bad else EXIT_OK)


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A run directory holding metrics.json.")) -> None:
    """Re-render a saved run (report.md, report.html) or sweep (sweep.md, sweep.html) from its JSON alone."""
    from .reporters import html, markdown, sweep_report, terminal

    if (run_dir / "sweep.json").exists():
        from rich.console import Console

        doc = json.loads((run_dir / "sweep.json").read_text())
        sweep_report.render_terminal(doc, Console())
        typer.echo("report: " + ", ".join(str(p) for p in sweep_report.write(doc, run_dir)))
        raise typer.Exit(EXIT_OK)
    path = run_dir / "metrics.json"
    try:
        metrics = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        typer.echo(f"error: {path}: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE)
    terminal.render(metrics)
    md = markdown.write(metrics, run_dir)
    page = html.write_run(metrics, run_dir)
    typer.echo(f"report: {md}, {page}")
    raise typer.Exit(exit_code(metrics) if metrics.get("status") else EXIT_USAGE)


@app.command("gate")
def gate_cmd(
    run_dir: Path = typer.Argument(..., help="A run directory holding metrics.json."),
    sla: Path = typer.Option(..., "--sla", help="SLA file: the mapping of a scenario's sla: block."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here (one test case per check)."),
    markdown_out: Optional[Path] = typer.Option(None, "--markdown", help="Write a Markdown summary here "
                                                "(default: $GITHUB_STEP_SUMMARY when set)."),
) -> None:
    """Judge a saved run against an SLA: exit 0 PASS, 1 FAIL, 3 INCONCLUSIVE or invalid run."""
    import os

    from rich.console import Console

    from . import atomic, gate
    from .errors import ScenarioError
    from .reporters import terminal

    try:
        spec = gate.load_sla(sla)
        result = gate.gate(run_dir, spec)
    except ScenarioError as exc:
        for line in exc.problems:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(EXIT_USAGE)
    except (OSError, json.JSONDecodeError) as exc:
        typer.echo(f"error: {run_dir / 'metrics.json'}: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE)
    console = Console()
    terminal.render_sla(result, console)
    for reason in result["reasons"]:
        console.print(f"[yellow]run {result['status']}: {reason}[/yellow]")
    name = run_dir.name
    if junit:
        atomic.write_text(junit, gate.junit_xml(result, name))
    summary = markdown_out or (Path(os.environ["GITHUB_STEP_SUMMARY"]) if os.environ.get("GITHUB_STEP_SUMMARY") else None)
    if summary:
        with open(summary, "a", encoding="utf-8") as f:  # step summaries accumulate
            f.write(gate.markdown(result, name))
    raise typer.Exit(gate.EXIT[result["verdict"]])


@app.command()
def version() -> None:
    """Print the version."""
    from . import __version__

    typer.echo(__version__)


def main() -> None:
    app()
