"""The command line: a thin typer layer over ``loadtest.session``.

Exit codes are defined once, in ``loadtest.core.exit_codes`` (the README lists them).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import typer

from loadtest.core import exit_codes
from loadtest.core.exit_codes import FAILED as EXIT_FAILED
from loadtest.core.exit_codes import INTERRUPTED as EXIT_INTERRUPTED
from loadtest.core.exit_codes import INVALID as EXIT_INVALID
from loadtest.core.exit_codes import OK as EXIT_OK
from loadtest.core.exit_codes import OUTPUT as EXIT_OUTPUT
from loadtest.core.exit_codes import SLA_FAILED as EXIT_SLA_FAIL
from loadtest.core.exit_codes import USAGE as EXIT_USAGE
from loadtest.reporters.console import make_console, styled

app = typer.Typer(
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="LLM inference latency load tester.",
)


def exit_code(metrics: dict) -> int:
    """For a metrics.json or a repeat.json (its pooled status and SLA verdict)."""
    verdict = (metrics.get("sla") or {}).get("verdict")
    return exit_codes.for_result(metrics["status"], verdict, metrics.get("interrupted_by"))


def _error(*lines: str) -> None:
    """Error lines on stderr; outside text in them is scrubbed of secrets, never parsed."""
    from loadtest.core import secrets
    from loadtest.core.text import visible

    for line in lines:
        typer.echo(f"error: {visible(secrets.scrub(str(line)))}", err=True)


def _load(path: Path, overrides: list[str]):
    """The scenario, with everything a run would refuse found now (datasets, traces, an empty
    window), before any model loads: exit 2 with ``file:line`` otherwise."""
    from loadtest.config.loading import load_scenario, resolve_path
    from loadtest.core.errors import ScenarioError
    from loadtest.workload.plan import check_plan

    try:
        loaded = load_scenario(path, overrides)
        check_plan(loaded.scenario, lambda name: resolve_path(loaded, name))
    except ScenarioError as exc:
        _error(*exc.problems)
        raise typer.Exit(EXIT_USAGE) from None
    load = loaded.scenario.load
    cores = os.cpu_count() or 1
    if load.ray is None and load.workers > cores:  # the machine's limit, not the file's
        _error(
            f"load.workers: {load.workers} worker processes on this machine's {cores} cores: "
            f"at most {cores} (each needs a core of its own to keep its schedule; load.ray "
            "spreads them over a cluster)"
        )
        raise typer.Exit(EXIT_USAGE)
    return loaded


def _workers_override(workers: int | None, ray: str | None = None) -> list[str]:
    out = [] if workers is None else [f"load.workers={workers}"]
    return out + ([] if ray is None else [f"load.ray={ray}"])


def _scenario_source(
    scenario: Path | None,
    overrides: list[str],
    url: str | None,
    model: str | None,
    flags: dict,
    save_to: Path | None,
    overwrite: bool,
) -> tuple[Path, list[str]]:
    """The scenario file to load and the overrides on it. With ``--url`` and no file, the
    scenario the flags describe, written to ``--save-scenario`` (or a temporary file)."""
    import os
    import shlex
    import sys
    import tempfile

    given = {k: v for k, v in flags.items() if v is not None}
    if scenario is not None:
        if given or save_to is not None:
            _error(
                f"{', '.join('--' + k.replace('_', '-') for k in given) or '--save-scenario'}: only without a scenario file"
            )
            raise typer.Exit(EXIT_USAGE)
        extra = [f"backend.base_url={url}"] if url else []
        extra += [f"backend.model={model}"] if model else []
        return scenario, extra + overrides
    if url is None:
        _error("give a scenario file, or --url for a served model (loadtest run --help)")
        raise typer.Exit(EXIT_USAGE)
    from loadtest.config.backend_specs import url_problem

    if problem := url_problem(url):  # before any request: no other scheme is ever opened
        _error(f"--url {problem}")
        raise typer.Exit(EXIT_USAGE)
    from loadtest.backends.openai.discovery import list_models
    from loadtest.config import quick
    from loadtest.config.loading import apply_overrides, parse_scenario
    from loadtest.core import atomic, secrets
    from loadtest.core.errors import BackendError, ScenarioError

    if model is None:
        try:
            models = list_models(url, os.environ.get("OPENAI_API_KEY"))
        except BackendError as exc:
            _error(f"--url: {exc}")
            raise typer.Exit(EXIT_FAILED) from None
        model = models[0]
        typer.echo(
            f"model: {model}"
            + (f" (the first of {len(models)} the server lists)" if len(models) > 1 else ""),
            err=True,
        )
    try:
        data = quick.scenario_from_flags(url=url, model=model, **given)
        # the saved file holds what runs, overrides included: `loadtest run FILE` repeats it
        # (the run itself loads the flags' scenario with the overrides on top, so that a bad
        # --set is named as such)
        parse_scenario(quick.to_yaml(data, ""), Path("--url"), overrides)
        apply_overrides(data, overrides, Path("--set"))
    except ScenarioError as exc:
        _error(*exc.problems)
        raise typer.Exit(EXIT_USAGE) from None
    # URL credentials are never written (the file, the run's copy, a temp file): the file
    # names the server without them, and they reach the run as an override held in memory
    secret_url = secrets.redact_url(url) != url
    data["backend"]["base_url"] = secrets.redact_url(url)
    keep_url = [f"backend.base_url={url}"] if secret_url else []
    secrets.register(*secrets.url_credentials(url))  # the command line below is scrubbed
    text = quick.to_yaml(data, "loadtest " + shlex.join(sys.argv[1:]))
    if save_to is not None:
        if save_to.exists() and not overwrite:
            _error(f"--save-scenario {save_to}: exists (--overwrite to replace it)")
            raise typer.Exit(EXIT_USAGE)
        atomic.write_text(save_to, text)
        typer.echo(f"scenario: {save_to}", err=True)
        return save_to, keep_url
    path = Path(tempfile.mkdtemp(prefix="loadtest-")) / "scenario.yml"
    atomic.write_text(path, text)
    return path, keep_url


def _claim(out: Path | None, loaded, overwrite: bool, suffix: str = "") -> Path:
    """The run (or sweep, repeat) directory, created now, before anything heavy starts."""
    from loadtest.core import rundir
    from loadtest.core.errors import OutputError

    try:
        if out is None and loaded.scenario.outputs.dir:
            out = Path(loaded.scenario.outputs.dir)
        if out is None:
            return rundir.default_dir(loaded.scenario.name + suffix)
        return rundir.claim(out, overwrite)
    except OutputError as exc:
        _error(str(exc))
        raise typer.Exit(EXIT_USAGE) from None


@app.command()
def run(
    scenario: Path | None = typer.Argument(
        None, help="Scenario YAML file (or none, with --url: a served model from flags)."
    ),
    url: str | None = typer.Option(
        None,
        "--url",
        help="An OpenAI-compatible endpoint (http://host:8000/v1): run it with no scenario "
        "file, or point the scenario's openai backend at it.",
    ),
    model: str | None = typer.Option(
        None, "--model", help="--url: the served model (default: the first /v1/models lists)."
    ),
    api: str | None = typer.Option(
        None, "--api", help="--url: chat or completions (default: completions; chat for --dataset)."
    ),
    rate: float | None = typer.Option(
        None, "--rate", help="--url: Poisson arrivals at this many requests/s (open loop)."
    ),
    concurrency: int | None = typer.Option(
        None, "--concurrency", help="--url: this many users in closed loop (default 1)."
    ),
    duration: str | None = typer.Option(
        None, "--duration", help="--url: the measured window (default 60s, after 5s of warm-up)."
    ),
    requests: int | None = typer.Option(
        None, "--requests", help="--url: measure this many requests instead of a duration."
    ),
    input_tokens: str | None = typer.Option(
        None,
        "--input-tokens",
        help="--url: prompt length: 256, or {dist: lognormal, mean: 256, sigma: 0.4}.",
    ),
    output_tokens: str | None = typer.Option(
        None, "--output-tokens", help="--url: output length, as --input-tokens (default 128)."
    ),
    dataset: str | None = typer.Option(
        None, "--dataset", help="--url: prompts from a JSONL file instead of synthetic ones."
    ),
    save_scenario: Path | None = typer.Option(
        None,
        "--save-scenario",
        help="--url: write the equivalent scenario file here (a first try made reproducible).",
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Run directory (exactly this path)."),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a field: dotted.key=value (repeatable)."
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=1,
        help="Client processes sharing the load (load.workers): more than one process can send.",
    ),
    ray: str | None = typer.Option(
        None,
        "--ray",
        metavar="ADDRESS",
        help="Run the workers as actors on this Ray cluster (load.ray; 'local' starts one here).",
    ),
    repeat: int = typer.Option(
        1,
        "--repeat",
        min=1,
        help="Run N times with schedule seeds seed..seed+N-1 (model loaded "
        "once); report the median and spread (repeat.json).",
    ),
    gate_: bool = typer.Option(
        False, "--gate", help="Gate the result inline, as `loadtest gate` would."
    ),
    sla: Path | None = typer.Option(
        None, "--sla", help="--gate: SLA file (default: the scenario's sla: block)."
    ),
    baseline: list[Path] = typer.Option(
        [], "--baseline", help="--gate: baseline run or repeat directory (repeatable)."
    ),
    junit: Path | None = typer.Option(None, "--junit", help="--gate: write JUnit XML here."),
    markdown_out: Path | None = typer.Option(
        None, "--markdown", help="--gate: write a Markdown summary here."
    ),
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="Replace an earlier loadtest result in --out (never other files).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live progress display."),
    as_json: bool = typer.Option(
        False, "--json", help="Print metrics.json (repeat.json) to stdout instead of tables."
    ),
    no_report: bool = typer.Option(
        False, "--no-report", help="Write metrics.json only (no report.md / report.html)."
    ),
) -> None:
    """Run one load test and write its run directory (metrics.json); --repeat N for replicates.

    ``loadtest run --url http://host:8000/v1`` runs a served model with no scenario file."""

    from_flags = scenario is None
    scenario, set_ = _scenario_source(
        scenario,
        set_ + _workers_override(workers, ray),
        url,
        model,
        dict(
            api=api,
            rate=rate,
            concurrency=concurrency,
            duration=duration,
            requests=requests,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            dataset=dataset,
        ),
        save_scenario,
        overwrite,
    )
    loaded = _load(scenario, set_)
    from loadtest.core.clock import MonotonicClock
    from loadtest.repeat import run_repeats
    from loadtest.reporters import terminal
    from loadtest.reporters.progress import choose as progress_for
    from loadtest.session import Session

    if (sla or baseline or junit or markdown_out) and not gate_:
        typer.echo("error: --sla, --baseline, --junit and --markdown need --gate", err=True)
        raise typer.Exit(EXIT_USAGE)
    spec = _gate_spec(sla, loaded) if gate_ else None
    if gate_ and not spec and not baseline:
        typer.echo(
            "error: --gate needs an SLA (the scenario's sla: block or --sla FILE) or a --baseline",
            err=True,
        )
        raise typer.Exit(EXIT_USAGE)
    console = make_console(stderr=as_json)
    out = _claim(out, loaded, overwrite)
    if from_flags:  # the run directory keeps the scenario the flags made
        from loadtest.core import atomic

        atomic.write_text(out / "scenario.yml", scenario.read_text(encoding="utf-8"))

    async def go():
        session = Session(
            MonotonicClock(),
            progress=progress_for(quiet, console.is_terminal),
            handle_signals=True,
        )
        try:
            if repeat > 1:
                return (await run_repeats(loaded, out, repeat, session)).view()
            return (await session.run_point(loaded, out, claimed=True)).metrics
        finally:
            await session.close()

    doc = _run_async(go)
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
    elif repeat > 1:
        terminal.render_repeat(doc, console, sla=not gate_)
        console.print(f"results: {out / 'repeat.json'}")
    else:
        terminal.render(doc, console, sla=not gate_)  # --gate prints its own verdict tables
        console.print(f"results: {out / 'metrics.json'}")
    if not no_report:
        dirs = [out / d for d in doc["runs"]] if repeat > 1 else [out]
        written = [p for d in dirs for p in _write_reports(d)]
        if repeat > 1:
            written += _write_repeat_report(out, doc)
        if written and not as_json:
            console.print("report: " + ", ".join(str(p) for p in written))
    code = exit_code(doc)
    if gate_ and code not in (EXIT_INTERRUPTED, EXIT_FAILED):
        code = _gate_and_report(out, spec, baseline, junit, markdown_out, console)
    raise typer.Exit(code)


@app.command()
def sweep(
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
    param: list[str] = typer.Option(
        [],
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
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Sweep directory (exactly this path)."
    ),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a field for every point: dotted.key=value."
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=1,
        help="Client processes sharing the load (load.workers): more than one process can send.",
    ),
    ray: str | None = typer.Option(
        None,
        "--ray",
        metavar="ADDRESS",
        help="Run the workers as actors on this Ray cluster (load.ray; 'local' starts one here).",
    ),
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="Replace an earlier loadtest result in --out (never other files).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live progress display."),
) -> None:
    """Run the scenario at several settings (model loaded once): curves, frontier, knee, sweep.json."""

    from loadtest import sweep as sweeps
    from loadtest.core.clock import MonotonicClock
    from loadtest.core.errors import ScenarioError
    from loadtest.reporters import sweep_report
    from loadtest.reporters.progress import choose as progress_for
    from loadtest.session import Session

    loaded = _load(scenario, set_ + _workers_override(workers, ray))
    console = make_console()
    try:
        axes = sweeps.parse_axes(batch_sizes, rates, concurrency, param)
        if not axes and not find_max_rate:
            raise ScenarioError(
                ["sweep: give --batch-sizes, --rates, --concurrency, --param or --find-max-rate"]
            )
    except ScenarioError as exc:
        _error(*exc.problems)
        raise typer.Exit(EXIT_USAGE) from None
    from loadtest.core.units import parse_duration_ns

    try:
        max_point_s = parse_duration_ns(max_point_duration) / 1e9
        if max_point_s <= 0:
            raise ValueError("must be positive")
    except ValueError as exc:
        _error(f"--max-point-duration {max_point_duration}: {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    out = _claim(out, loaded, overwrite, "-sweep")

    session = Session(
        MonotonicClock(),
        progress=progress_for(quiet, console.is_terminal),
        handle_signals=True,
    )

    async def go():
        try:
            if find_max_rate:
                return await sweeps.find_max_rate(
                    scenario,
                    set_,
                    out,
                    session,
                    tolerance,
                    max_point_s=max_point_s,
                    min_goodput=min_goodput,
                )
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
                )
            ).doc
        finally:
            await session.close()

    doc = _run_async(go).view()
    sweep_report.render_terminal(doc, console)
    paths = sweep_report.write(doc, out)
    console.print(f"sweep: {out / 'sweep.json'}  report: {', '.join(str(p) for p in paths)}")
    if doc["status"] == "interrupted":
        raise typer.Exit(exit_codes.SIGNALS.get(session.interrupted_by or "", EXIT_INTERRUPTED))
    if find_max_rate and doc["status"] == "no_rate_meets_sla":
        raise typer.Exit(EXIT_SLA_FAIL)
    if find_max_rate and doc["status"] != "ok":
        console.print(styled(("no verdict: ", "yellow"), doc["max_rate"]["evidence"]))
        raise typer.Exit(EXIT_INVALID)
    if doc["status"] == "invalid":  # no point measured anything trustworthy
        console.print(styled(("invalid sweep: ", "yellow"), "no point's run was valid"))
        raise typer.Exit(EXIT_INVALID)
    raise typer.Exit(EXIT_OK)


@app.command()
def validate(
    files: list[Path] = typer.Argument(..., help="Scenario files."),
    set_: list[str] = typer.Option([], "--set", help="Override a field: dotted.key=value."),
) -> None:
    """Check scenario files as a run would (datasets, traces and the plan too), without loading
    a model or touching a GPU."""
    bad = 0
    for f in files:
        try:
            _load(f, set_)
            typer.echo(f"ok: {f}")
        except typer.Exit:
            bad += 1
    raise typer.Exit(EXIT_USAGE if bad else EXIT_OK)


@app.command()
def report(
    run_dir: Path = typer.Argument(
        ..., help="A run (metrics.json), repeat (repeat.json) or sweep (sweep.json) directory."
    ),
) -> None:
    """Re-render a saved run (report.md, report.html), repeat (repeat.html and each replicate's)
    or sweep (sweep.md, sweep.html) from its JSON alone."""
    from loadtest.reporters import exports, html, markdown, sweep_report, terminal
    from loadtest.results.model import ResultReadError, read_repeat, read_run, read_sweep

    try:  # through the typed readers: a broken or hostile file is refused, never half-read
        sweep = read_sweep(run_dir / "sweep.json") if (run_dir / "sweep.json").exists() else None
        repeat = (
            read_repeat(run_dir / "repeat.json") if (run_dir / "repeat.json").exists() else None
        )
    except ResultReadError as exc:
        _error(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    if sweep is not None:
        doc = sweep.view()
        sweep_report.render_terminal(doc, make_console())
        typer.echo("report: " + ", ".join(str(p) for p in sweep_report.write(doc, run_dir)))
        raise typer.Exit(EXIT_OK)
    if repeat is not None:
        doc = repeat.view()
        written = [p for d in doc["runs"] for p in _write_reports(run_dir / d)]
        written += _write_repeat_report(run_dir, doc)
        terminal.render_repeat(doc, make_console())
        typer.echo("report: " + ", ".join(str(p) for p in written))
        raise typer.Exit(exit_code(doc))

    try:
        metrics = read_run(run_dir / "metrics.json").view()
    except ResultReadError as exc:
        _error(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    terminal.render(metrics)
    written = [
        markdown.write(metrics, run_dir),
        html.write_run(metrics, run_dir),
        *exports.write(metrics, run_dir),
    ]
    typer.echo("report: " + ", ".join(str(p) for p in written))
    raise typer.Exit(exit_code(metrics) if metrics.get("status") else EXIT_USAGE)


def _write_reports(run_dir: Path) -> list[Path]:
    """report.md and report.html beside a run's metrics.json. The result is already written:
    a report that cannot be rendered is a warning, never a lost run."""
    from loadtest.reporters import exports, html, markdown
    from loadtest.results.model import ResultReadError, read_run

    try:
        metrics = read_run(run_dir / "metrics.json").view()
        return [
            markdown.write(metrics, run_dir),
            html.write_run(metrics, run_dir),
            *exports.write(metrics, run_dir),
        ]
    except (ResultReadError, OSError, ValueError, ImportError) as exc:
        _error(f"{run_dir}: the report could not be written ({exc}); metrics.json is intact")
        return []


def _write_repeat_report(out: Path, doc: dict) -> list[Path]:
    """repeat.html beside repeat.json: median and spread, replicates' percentiles overlaid."""
    from loadtest.core import atomic
    from loadtest.reporters import html
    from loadtest.results.model import ResultReadError, read_run

    try:
        curves = [(d, read_run(out / d / "metrics.json").histograms or {}) for d in doc["runs"]]
        atomic.write_text(out / "repeat.html", html.repeat_html(doc, curves))
        return [out / "repeat.html"]
    except (ResultReadError, OSError, ValueError, ImportError) as exc:
        _error(f"{out}: repeat.html could not be written ({exc}); repeat.json is intact")
        return []


def _gate_spec(sla: Path | None, loaded=None):
    """The SLA (``config.scenario.Sla``) from a file, else from the scenario, else None."""
    from loadtest.analysis import gate
    from loadtest.core.errors import ScenarioError

    try:
        if sla:
            return gate.load_sla(sla)
    except ScenarioError as exc:
        for line in exc.problems:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    if loaded is not None and loaded.scenario.sla:
        return loaded.scenario.sla
    return None


def _gate_and_report(
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

    from loadtest.analysis import gate, regression
    from loadtest.analysis.sla import overall as sla_overall
    from loadtest.core import atomic
    from loadtest.reporters import terminal
    from loadtest.results import runset

    try:
        run = runset.load(run_dir)
        bases = [runset.load(b) for b in baselines]
        result = gate.gate(
            run,
            spec,
            bases,
            metrics=metrics or regression.DEFAULT_METRICS,
            min_effect=min_effect,
            confidence=confidence,
        ).model_dump()
    except runset.RunSetError as exc:
        typer.echo(f"error: {exc}", err=True)
        return EXIT_USAGE
    if result["checks"]:
        terminal.render_sla(
            {
                "verdict": sla_overall(c["verdict"] for c in result["checks"]),
                "checks": result["checks"],
            },
            console,
        )
    terminal.render_regression(result["regression"], console)
    for reason in result["reasons"]:
        console.print(f"run {result['status']}: {reason}", style="yellow")
    for warning in result["warnings"]:
        console.print(f"warning: {warning}", style="yellow")
    style = terminal.VERDICT_STYLE[result["verdict"]]
    console.print(styled("gate: ", (result["verdict"], style)))
    name = run_dir.name
    if junit:
        atomic.write_text(junit, gate.junit_xml(result, name))
    summary = markdown_out or (
        Path(os.environ["GITHUB_STEP_SUMMARY"]) if os.environ.get("GITHUB_STEP_SUMMARY") else None
    )
    if summary:
        with open(summary, "a", encoding="utf-8") as f:  # step summaries accumulate
            f.write(gate.markdown(result, name))
    return gate.EXIT[result["verdict"]]


def _metric_names(metric: list[str]) -> tuple:
    from loadtest.analysis import regression

    names = tuple(metric) or regression.DEFAULT_METRICS
    for name in names:
        try:
            regression.parse_metric(name)
        except ValueError as exc:
            typer.echo(f"error: --metric {exc}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
    return names


@app.command("gate")
def gate_cmd(
    run_dir: Path = typer.Argument(
        ..., help="A run directory (metrics.json) or repeat directory (repeat.json)."
    ),
    sla: Path | None = typer.Option(
        None, "--sla", help="SLA file: the mapping of a scenario's sla: block."
    ),
    baseline: list[Path] = typer.Option(
        [],
        "--baseline",
        help="Baseline run or repeat directory (repeatable: "
        "replicates); checks each metric for a regression.",
    ),
    metric: list[str] = typer.Option(
        [],
        "--metric",
        help="Regression metric (repeatable; default: ttft/itl/e2e "
        "p50 and p99, output_tokens_per_s).",
    ),
    min_effect: float = typer.Option(
        0.05, "--min-effect", help="Smallest regression that fails, as a fraction."
    ),
    confidence: float = typer.Option(
        0.99,
        "--confidence",
        min=0.5,
        max=0.9999,
        help="Regression: 1 - the chance that an A/A comparison fails any check.",
    ),
    junit: Path | None = typer.Option(
        None, "--junit", help="Write JUnit XML here (one test case per check)."
    ),
    markdown_out: Path | None = typer.Option(
        None,
        "--markdown",
        help="Write a Markdown summary here (default: $GITHUB_STEP_SUMMARY when set).",
    ),
) -> None:
    """Judge a saved run against an SLA and/or baselines: exit 0 PASS, 1 FAIL, 3 INCONCLUSIVE or invalid run."""
    if not sla and not baseline:
        typer.echo("error: give --sla FILE, --baseline DIR, or both", err=True)
        raise typer.Exit(EXIT_USAGE)
    names = _metric_names(metric)
    raise typer.Exit(
        _gate_and_report(
            run_dir,
            _gate_spec(sla),
            baseline,
            junit,
            markdown_out,
            make_console(),
            names,
            min_effect,
            confidence,
        )
    )


@app.command()
def compare(
    run_a: Path = typer.Argument(..., help="Run or repeat directory (the reference)."),
    run_b: Path = typer.Argument(..., help="Run or repeat directory (compared with A)."),
    metric: list[str] = typer.Option(
        [], "--metric", help="Metric (repeatable; default: the headline set)."
    ),
    confidence: float = typer.Option(
        0.95,
        "--confidence",
        min=0.5,
        max=0.9999,
        help="Of the intervals, simultaneous over the metrics.",
    ),
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
    from loadtest.core import atomic
    from loadtest.reporters import html, terminal
    from loadtest.results import runset

    names = _metric_names(metric)
    try:
        a, b = runset.load(run_a), runset.load(run_b)
    except runset.RunSetError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    if not a.measured or not b.measured:
        typer.echo(f"error: {run_a if not a.measured else run_b}: nothing measured", err=True)
        raise typer.Exit(EXIT_USAGE)
    checks = regression.as_dicts(
        regression.compare(a.measured, b.measured, names, confidence=confidence)
    )
    if as_json:
        typer.echo(
            json.dumps(
                {"a": str(run_a), "b": str(run_b), "confidence": confidence, "metrics": checks},
                indent=2,
            )
        )
        raise typer.Exit(EXIT_OK)
    console = make_console()
    terminal.render_compare(checks, a.name, b.name, confidence, console)
    warnings = list(gate.scenario_differences(a.measured[0], b.measured[0]))
    warnings += [
        f"{rs.name}: not every run is valid ({', '.join(m['status'] for m in rs.runs)})"
        for rs in (a, b)
        if any(m["status"] != "ok" for m in rs.runs)
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
        target = html_out or Path(run_b) / f"compare-vs-{_safe_name(a.name)}.html"
        atomic.write_text(target, page)
        console.print(f"report: {target}", highlight=False)
    raise typer.Exit(EXIT_OK)


def _safe_name(name: str) -> str:
    """A directory name made safe for a file name: letters, digits, ``.-_`` only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "A"


@app.command()
def env(as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON.")) -> None:
    """The environment manifest a run records: versions, commit, CPU, GPUs (NVML), and its warnings."""
    from rich.table import Table

    from loadtest.telemetry import environment

    manifest = environment.collect()
    problems = environment.warnings(manifest)
    if as_json:
        typer.echo(json.dumps({**manifest, "warnings": problems}, indent=2))
        raise typer.Exit(EXIT_OK)
    console = make_console()
    table = Table(title="environment", title_justify="left", show_header=False)
    for key, value in manifest.items():
        if key != "gpus":
            table.add_row(key, "-" if value in (None, {}, []) else str(value))
    console.print(table)
    for g in manifest.get("gpus") or []:
        gt = Table(title=f"GPU {g['index']}: {g['name']}", title_justify="left", show_header=False)
        for key, value in g.items():
            if key not in ("index", "name"):
                gt.add_row(key, str(value))
        console.print(gt)
    if not manifest.get("gpus"):
        console.print(f"GPUs: none ({manifest.get('gpu_reason')})")
    for w in problems:
        console.print(f"warning: {w}", style="yellow")
    raise typer.Exit(EXIT_OK)


@app.command()
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
        raise typer.Exit(EXIT_USAGE) from None
    except RuntimeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    path = cal.save(result)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        sheet = result["datasheet"]
        typer.echo(
            f"{result['device_name']}: copy bandwidth {result['bw_gb_s']:g} GB/s, {result['dtype']} matmul "
            f"{result['tflops']:g} TFLOP/s"
            + (
                f" (datasheet: {sheet['bw_gb_s']:g} GB/s, {sheet['tflops']:g} TFLOP/s)"
                if sheet
                else ""
            )
        )
        typer.echo(f"cached: {path}")
    raise typer.Exit(EXIT_OK)


SCHEMAS = {
    "scenario": ("loadtest.config.scenario", "Scenario"),
    "result": ("loadtest.results.model", "RunMetrics"),
    "repeat": ("loadtest.results.model", "RepeatDoc"),
    "sweep": ("loadtest.results.model", "SweepDoc"),
    "gate": ("loadtest.results.model", "GateResult"),
}


@app.command()
def schema(
    kind: str = typer.Argument(
        ..., help=f"Which document: {', '.join(SCHEMAS)} (result is metrics.json)."
    ),
) -> None:
    """Print a JSON Schema: of scenario files (for editor validation) or of a result document."""
    import importlib

    if kind not in SCHEMAS:
        _error(f"schema {kind}: expected one of {', '.join(SCHEMAS)}")
        raise typer.Exit(EXIT_USAGE)
    module, name = SCHEMAS[kind]
    model = getattr(importlib.import_module(module), name)
    doc = model.model_json_schema(by_alias=True)
    doc = {"$schema": "https://json-schema.org/draft/2020-12/schema", **doc}
    typer.echo(json.dumps(doc, indent=2))
    raise typer.Exit(EXIT_OK)


@app.command()
def version() -> None:
    """Print the version."""
    from loadtest.core._version import __version__

    typer.echo(__version__)


def _run_async(go):
    """Run a command's coroutine; map loadtest's errors to their exit codes."""
    import asyncio

    from loadtest.core.errors import BackendError, LoadtestError, OutputError, ScenarioError
    from loadtest.session import ResultWriteError

    try:
        return asyncio.run(go())
    except ScenarioError as exc:
        _error(*exc.problems)
        raise typer.Exit(EXIT_USAGE) from None
    except OutputError as exc:
        _error(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    except ResultWriteError as exc:
        _error(str(exc))
        if exc.saved_to:
            _error(f"the result was saved to {exc.saved_to} instead")
        raise typer.Exit(EXIT_OUTPUT) from None
    except (BackendError, LoadtestError) as exc:
        _error(str(exc))
        raise typer.Exit(EXIT_FAILED) from None


def main() -> None:
    """The ``loadtest`` entry point: a crash is an internal error (exit 5), never exit 1, which
    means "SLA failed" to a release pipeline."""
    import sys
    import traceback

    from loadtest.core import secrets

    # every channel out of the process passes the one scrubber: echoes, --json, tables, errors
    sys.stdout, sys.stderr = secrets.scrubbed(sys.stdout), secrets.scrubbed(sys.stderr)
    try:
        app()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except Exception:
        sys.stderr.write(traceback.format_exc())
        sys.stderr.write(
            "loadtest: internal error (a bug in loadtest): please report it with the "
            "traceback above\n"
        )
        sys.exit(exit_codes.INTERNAL)
