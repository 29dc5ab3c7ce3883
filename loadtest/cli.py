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

    from .errors import LoadtestError
    from .progress import live_progress
    from .reporters import terminal
    from .session import run_scenario

    console = Console(stderr=as_json)
    try:
        result = run_scenario(loaded, out, progress=None if quiet or not console.is_terminal else live_progress(),
                              handle_signals=True)
    except LoadtestError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE if exc.__class__.__name__ == "ScenarioError" else EXIT_FAILED)
    if as_json:
        typer.echo(json.dumps(result.metrics, indent=2))
    else:
        terminal.render(result.metrics, console)
        console.print(f"results: {result.out_dir / 'metrics.json'}")
    raise typer.Exit(exit_code(result.metrics))


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
    """Re-render the summary of a saved run from its metrics.json alone."""
    from .reporters import markdown, terminal

    path = run_dir / "metrics.json"
    try:
        metrics = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        typer.echo(f"error: {path}: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE)
    terminal.render(metrics)
    md = markdown.write(metrics, run_dir)
    typer.echo(f"report: {md}")
    raise typer.Exit(exit_code(metrics) if metrics.get("status") else EXIT_USAGE)


@app.command()
def version() -> None:
    """Print the version."""
    from . import __version__

    typer.echo(__version__)


def main() -> None:
    app()
