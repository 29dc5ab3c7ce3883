"""``loadtest run``: one load point (or --repeat N replicates), its reports, and an optional
inline gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from loadtest.cli import options
from loadtest.cli.common import claim, load, run_async, say_environment_settings, usage_error
from loadtest.cli.from_url import scenario_source
from loadtest.cli.gating import gate_and_report, gate_spec
from loadtest.cli.reports import exit_code, write_repeat_report, write_reports
from loadtest.core import exit_codes
from loadtest.reporters.console import make_console

if TYPE_CHECKING:
    from rich.console import Console

    from loadtest.config.loading import LoadedScenario
    from loadtest.config.objectives import SlaObjectives
    from loadtest.results.model import RepeatDoc, RunMetrics


def run(
    ctx: typer.Context,
    scenario: Path | None = typer.Argument(
        None,
        envvar="LOADTEST_SCENARIO",
        help="Scenario YAML file (or none, with --url: a served model from flags).",
    ),
    url: list[str] | None = typer.Option(
        None,
        "--url",
        envvar="LOADTEST_URL",
        help="An OpenAI-compatible endpoint (http://host:8000/v1, unix:///run/vllm.sock:/v1): "
        "run it with no scenario file, or point the scenario's openai backend at it. Repeat it "
        "for several endpoints of one model (backend.endpoints; backend.routing spreads them).",
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        envvar="LOADTEST_MODEL",
        help="--url: the served model (default: the first /v1/models lists).",
    ),
    api: str | None = typer.Option(
        None,
        "--api",
        envvar="LOADTEST_API",
        help="--url: chat or completions (default: completions; chat for --dataset).",
    ),
    rate: float | None = typer.Option(
        None,
        "--rate",
        envvar="LOADTEST_RATE",
        help="--url: Poisson arrivals at this many requests/s (open loop); inf: every request "
        "at once (a burst of --requests).",
    ),
    concurrency: int | None = typer.Option(
        None,
        "--concurrency",
        envvar="LOADTEST_CONCURRENCY",
        help="--url: this many users in closed loop (default 1); with --rate, the open loop's "
        "cap on requests in flight (vLLM's --max-concurrency): the wait for a slot is its own "
        "figure, slot_wait.",
    ),
    duration: str | None = typer.Option(
        None,
        "--duration",
        envvar="LOADTEST_DURATION",
        help="--url: the measured window (default 60s, after 5s of warm-up).",
    ),
    requests: int | None = typer.Option(
        None,
        "--requests",
        envvar="LOADTEST_REQUESTS",
        help="--url: measure this many requests instead of a duration, with no warm-up (as "
        "vllm bench serve's and AIPerf's counts); --warmup adds one.",
    ),
    warmup: str | None = typer.Option(
        None,
        "--warmup",
        envvar="LOADTEST_WARMUP",
        help="--url: warm-up before the window, unmeasured: a duration (5s, the default with "
        "--duration) or a request count (10); 0 for none.",
    ),
    input_tokens: str | None = typer.Option(
        None,
        "--input-tokens",
        envvar="LOADTEST_INPUT_TOKENS",
        help="--url: prompt length: 256, or {dist: lognormal, mean: 256, sigma: 0.4}.",
    ),
    output_tokens: str | None = typer.Option(
        None,
        "--output-tokens",
        envvar="LOADTEST_OUTPUT_TOKENS",
        help="--url: output length, as --input-tokens (default 128).",
    ),
    dataset: str | None = typer.Option(
        None,
        "--dataset",
        envvar="LOADTEST_DATASET",
        help="--url: prompts from a JSONL file instead of synthetic ones.",
    ),
    save_scenario: Path | None = typer.Option(
        None,
        "--save-scenario",
        help="--url: write the equivalent scenario file here (a first try made reproducible).",
    ),
    out: options.Out = None,
    set_: options.Set = None,
    workers: options.Workers = None,
    ray: options.Ray = None,
    metrics_port: options.MetricsPort = None,
    metrics_bind: options.MetricsBind = None,
    otel: options.Otel = False,
    repeat: int = typer.Option(
        1,
        "--repeat",
        envvar="LOADTEST_REPEAT",
        min=1,
        help="Run N times with schedule seeds seed..seed+N-1 (model loaded "
        "once); report the median and spread (repeat.json).",
    ),
    gate_: bool = typer.Option(
        False,
        "--gate",
        envvar="LOADTEST_GATE",
        help="Gate the result inline, as `loadtest gate` would.",
    ),
    sla: Path | None = typer.Option(
        None,
        "--sla",
        envvar="LOADTEST_SLA",
        help="--gate: SLA file (default: the scenario's sla: block).",
    ),
    baseline: list[Path] | None = typer.Option(
        None,
        "--baseline",
        envvar="LOADTEST_BASELINE",
        help="--gate: baseline run or repeat directory (repeatable).",
    ),
    junit: Path | None = typer.Option(
        None, "--junit", envvar="LOADTEST_JUNIT", help="--gate: write JUnit XML here."
    ),
    markdown_out: Path | None = typer.Option(
        None,
        "--markdown",
        envvar="LOADTEST_MARKDOWN",
        help="--gate: write a Markdown summary here.",
    ),
    min_effect: options.MinEffect = 0.05,
    overwrite: options.Overwrite = False,
    quiet: options.Quiet = False,
    as_json: bool = typer.Option(
        False, "--json", help="Print metrics.json (repeat.json) to stdout instead of tables."
    ),
    no_report: bool = typer.Option(
        False, "--no-report", help="Write metrics.json only (no report.md / report.html)."
    ),
) -> None:
    """Run one load test and write its run directory (metrics.json); --repeat N for replicates.

    ``loadtest run --url http://host:8000/v1`` runs a served model with no scenario file."""
    say_environment_settings(ctx)
    flags = dict(
        api=api,
        rate=rate,
        concurrency=concurrency,
        duration=duration,
        requests=requests,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        dataset=dataset,
        warmup=warmup,
    )
    overrides = (set_ or []) + options.workers_override(
        workers, ray, metrics_port, otel, metrics_bind
    )
    path, overrides = scenario_source(
        scenario, overrides, url, model, flags, save_scenario, overwrite
    )
    loaded = load(path, overrides)
    spec = _gate_options(loaded, gate_, sla, baseline, junit, markdown_out)
    console = make_console(stderr=as_json)
    out = claim(out, loaded, overwrite)
    if scenario is None:  # the run directory keeps the scenario the flags made
        from loadtest.core import atomic

        atomic.write_text(out / "scenario.yml", path.read_text(encoding="utf-8"))
    doc = run_async(lambda: _measure(loaded, out, repeat, quiet, console))
    _show(doc, out, repeat, console, as_json=as_json, gated=gate_, reports=not no_report)
    code = exit_code(doc)
    if gate_ and code not in (exit_codes.INTERRUPTED, exit_codes.FAILED):
        code = gate_and_report(
            out, spec, baseline or [], junit, markdown_out, console, min_effect=min_effect
        )
    raise typer.Exit(code)


def _gate_options(
    loaded: LoadedScenario,
    gate_: bool,
    sla: Path | None,
    baseline: list[Path] | None,
    junit: Path | None,
    markdown_out: Path | None,
) -> SlaObjectives | None:
    """The SLA an inline gate judges by (None without --gate); the gate flags checked."""
    if (sla or baseline or junit or markdown_out) and not gate_:
        usage_error("--sla, --baseline, --junit and --markdown need --gate")
    spec = gate_spec(sla, loaded) if gate_ else None
    if gate_ and not spec and not baseline:
        usage_error("--gate needs an SLA (the scenario's sla: block or --sla FILE) or a --baseline")
    return spec


async def _measure(
    loaded: LoadedScenario, out: Path, repeat: int, quiet: bool, console: Console
) -> RunMetrics | RepeatDoc:
    """The run (or its replicates), as the document written."""
    from loadtest.core.clock import MonotonicClock
    from loadtest.repeat import run_repeats
    from loadtest.reporters.progress import choose as progress_for
    from loadtest.session import Session

    session = Session(
        MonotonicClock(),
        progress=progress_for(quiet, console.is_terminal),
        handle_signals=True,
    )
    try:
        if repeat > 1:
            return await run_repeats(loaded, out, repeat, session)
        return (await session.run_point(loaded, out, claimed=True)).result
    finally:
        await session.close()


def _show(
    doc: RunMetrics | RepeatDoc,
    out: Path,
    repeat: int,
    console: Console,
    *,
    as_json: bool,
    gated: bool,
    reports: bool,
) -> None:
    """The result on the terminal (or as JSON), and its reports written beside it."""
    from loadtest.reporters import terminal
    from loadtest.results.model import RepeatDoc

    if as_json:
        typer.echo(json.dumps(doc.view(), indent=2))
    elif isinstance(doc, RepeatDoc):
        terminal.render_repeat(doc, console, sla=not gated)
        console.print(f"results: {out / 'repeat.json'}")
    else:
        terminal.render(doc, console, sla=not gated)  # --gate prints its own verdict tables
        console.print(f"results: {out / 'metrics.json'}")
    if not reports:
        return
    dirs = [out / d for d in doc.runs] if isinstance(doc, RepeatDoc) else [out]
    written = [p for d in dirs for p in write_reports(d)]
    if isinstance(doc, RepeatDoc):
        written += write_repeat_report(out, doc)
    if written and not as_json:
        console.print("report: " + ", ".join(str(p) for p in written))
