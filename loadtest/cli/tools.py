"""The small commands: ``validate``, ``env``, ``calibrate``, ``schema``, ``version``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from loadtest.cli import options
from loadtest.cli.common import error, load_planned, say_environment_settings
from loadtest.core import exit_codes
from loadtest.reporters.console import make_console


def validate(
    ctx: typer.Context,
    files: list[Path] = typer.Argument(..., help="Scenario files."),
    set_: options.Set = None,
) -> None:
    """Check scenario files as a run would (datasets, traces and the plan too), without loading
    a model or touching a GPU."""
    say_environment_settings(ctx)
    bad = 0
    for f in files:
        try:
            loaded, planned = load_planned(f, set_ or [])
            typer.echo(f"ok: {f}{_undecidable(loaded.scenario.sla, planned)}")
        except typer.Exit:
            bad += 1
    raise typer.Exit(exit_codes.USAGE if bad else exit_codes.OK)


def _undecidable(sla, planned) -> str:
    """The SLA checks this window holds too few samples to PASS, said where validation is."""
    if sla is None:
        return ""
    from loadtest.analysis.planning import sla_needs

    short = [n for n in sla_needs(sla, planned) if n.decides is False]
    if not short:
        return ""
    named = ", ".join(f"{n.name} needs >= {n.clean:,} {n.samples}" for n in short)
    return (
        f" (this window plans too few to PASS {named}: INCONCLUSIVE at best; `loadtest plan` "
        "says how long a window would do)"
    )


def env(as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON.")) -> None:
    """The environment manifest a run records: versions, commit, CPU, GPUs (NVML), and its warnings."""
    from rich.table import Table

    from loadtest.telemetry import environment

    manifest = environment.collect()
    problems = environment.warnings(manifest)
    if as_json:
        typer.echo(json.dumps({**manifest.view(), "warnings": problems}, indent=2))
        raise typer.Exit(exit_codes.OK)
    console = make_console()
    table = Table(title="environment", title_justify="left", show_header=False)
    for key, value in manifest.view().items():
        if key != "gpus":
            table.add_row(key, "-" if value in (None, {}, []) else str(value))
    console.print(table)
    for g in manifest.gpus or []:
        gt = Table(title=f"GPU {g.index}: {g.name}", title_justify="left", show_header=False)
        for key, value in g.view().items():
            if key not in ("index", "name"):
                gt.add_row(key, str(value))
        console.print(gt)
    if not manifest.gpus:
        console.print(f"GPUs: none ({manifest.gpu_reason})")
    for w in problems:
        console.print(f"warning: {w}", style="yellow")
    raise typer.Exit(exit_codes.OK)


def calibrate(
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Measure this device's copy bandwidth and matmul rate; cache them as the roofline's peaks."""
    from loadtest.telemetry import calibrate as cal

    try:
        result = cal.measure(device)
    except ImportError:
        typer.echo("error: calibrate needs torch: pip install -e '.[transformers]'", err=True)
        raise typer.Exit(exit_codes.USAGE) from None
    except RuntimeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exit_codes.FAILED) from None
    path = cal.save(result)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        sheet = result.datasheet
        typer.echo(
            f"{result.device_name}: copy bandwidth {result.bw_gb_s:g} GB/s, {result.dtype} matmul "
            f"{result.tflops:g} TFLOP/s"
            + (f" (datasheet: {sheet.bw_gb_s:g} GB/s, {sheet.tflops:g} TFLOP/s)" if sheet else "")
        )
        typer.echo(f"cached: {path}")
    raise typer.Exit(exit_codes.OK)


SCHEMAS = {
    "scenario": ("loadtest.config.scenario", "Scenario"),
    "result": ("loadtest.results.model", "RunMetrics"),
    "repeat": ("loadtest.results.model", "RepeatDoc"),
    "sweep": ("loadtest.results.model", "SweepDoc"),
    "gate": ("loadtest.results.model", "GateResult"),
}


def schema(
    kind: str = typer.Argument(
        ..., help=f"Which document: {', '.join(SCHEMAS)} (result is metrics.json)."
    ),
) -> None:
    """Print a JSON Schema: of scenario files (for editor validation) or of a result document."""
    import importlib

    if kind not in SCHEMAS:
        error(f"schema {kind}: expected one of {', '.join(SCHEMAS)}")
        raise typer.Exit(exit_codes.USAGE)
    module, name = SCHEMAS[kind]
    model = getattr(importlib.import_module(module), name)
    doc = model.model_json_schema(by_alias=True)
    doc = {"$schema": "https://json-schema.org/draft/2020-12/schema", **doc}
    typer.echo(json.dumps(doc, indent=2))
    raise typer.Exit(exit_codes.OK)


def version() -> None:
    """Print the version."""
    from loadtest.core._version import __version__

    typer.echo(__version__)


def mock_server(
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="0: any free port."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Where it listens (loopback; 0.0.0.0 in a container)."
    ),
    model: str = typer.Option("mock-model", "--model", help="The model /v1/models lists."),
    ttft_ms: float | None = typer.Option(
        None, "--ttft-ms", min=0, help="Wait before the first token (default 50)."
    ),
    itl_ms: float | None = typer.Option(
        None,
        "--itl-ms",
        min=0,
        help="Gap between a stream's tokens (default 10; 0: as fast as it can write them, a "
        "pace no client can stamp exactly).",
    ),
    step_ms: float | None = typer.Option(
        None, "--step-ms", min=0.1, help="Instead: a token to every stream each step (batching)."
    ),
) -> None:
    """An OpenAI-compatible server with no model (completions, chat, embeddings, /metrics), to
    try a pipeline or a CI job with no GPU; until Ctrl-C."""
    import asyncio
    import contextlib

    from loadtest.backends.openai.mock_server import MockSettings, serve

    default = MockSettings()
    settings = MockSettings(
        model=model,
        ttft_ms=default.ttft_ms if ttft_ms is None else ttft_ms,
        itl_ms=default.itl_ms if itl_ms is None else itl_ms,
        step_ms=step_ms,
    )

    def ready(url: str) -> None:
        typer.echo(f"mock server: {url} (model {model}); Ctrl-C stops it", err=True)

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(settings, host, port, ready))
    except OSError as exc:
        error(f"--port {port}: {exc}")
        raise typer.Exit(exit_codes.USAGE) from None
    raise typer.Exit(exit_codes.OK)
