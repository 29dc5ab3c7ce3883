"""What every command shares: errors on stderr (scrubbed, escaped), scenario loading with
everything a run would refuse found first, claiming the output directory, and running a
command's coroutine with loadtest's errors mapped to their exit codes (``core.exit_codes``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer

from loadtest.core import exit_codes

if TYPE_CHECKING:
    from loadtest.config.loading import LoadedScenario
    from loadtest.workload.plan import Plan

T = TypeVar("T")


def error(*lines: str) -> None:
    """Error lines on stderr; outside text in them is scrubbed of secrets, never parsed."""
    from loadtest.core import secrets
    from loadtest.core.text import visible

    for line in lines:
        typer.echo(f"error: {visible(secrets.scrub(str(line)))}", err=True)


def say_environment_settings(ctx: typer.Context) -> list[str]:
    """Tell stderr which of the command's settings came from ``LOADTEST_*`` environment
    variables (names only: a URL may carry a password), so none acts unseen; returns them."""

    def from_environment(name: str | None) -> bool:
        source = ctx.get_parameter_source(name) if name else None
        return getattr(source, "name", None) == "ENVIRONMENT"  # click's, or typer's own copy

    said = [
        f"{p.envvar} ({p.opts[0] if p.opts[0].startswith('-') else p.name})"
        for p in ctx.command.params
        if from_environment(p.name)
    ]
    if said:
        typer.echo(f"loadtest: from the environment: {', '.join(said)}", err=True)
    return said


def usage_error(*lines: str) -> NoReturn:
    """The lines on stderr, and exit 2 (a usage error)."""
    error(*lines)
    raise typer.Exit(exit_codes.USAGE)


def load(path: Path, overrides: list[str]) -> LoadedScenario:
    """The scenario, with everything a run would refuse found now (datasets, traces, an empty
    window), before any model loads: exit 2 with ``file:line`` otherwise."""
    return load_planned(path, overrides)[0]


def load_planned(path: Path, overrides: list[str]) -> tuple[LoadedScenario, Plan]:
    """``load``, and the plan it checked (built with a byte tokenizer: its schedule and counts
    are the run's, its prompt lengths may not be)."""
    from loadtest.config.loading import load_scenario, resolve_path
    from loadtest.core.errors import ScenarioError
    from loadtest.workload.plan import check_plan

    try:
        loaded = load_scenario(path, overrides)
        plan = check_plan(loaded.scenario, lambda name: resolve_path(loaded, name))
    except ScenarioError as exc:
        usage_error(*exc.problems)
    load = loaded.scenario.load
    cores = os.cpu_count() or 1
    if load.ray is None and load.workers > cores:  # the machine's limit, not the file's
        usage_error(
            f"load.workers: {load.workers} worker processes on this machine's {cores} cores: "
            f"at most {cores} (each needs a core of its own to keep its schedule; load.ray "
            "spreads them over a cluster)"
        )
    return loaded, plan


def claim(out: Path | None, loaded: LoadedScenario, overwrite: bool, suffix: str = "") -> Path:
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
        usage_error(str(exc))


def run_async(go: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a command's coroutine; map loadtest's errors to their exit codes."""
    from loadtest.core import loop
    from loadtest.core.errors import BackendError, LoadtestError, OutputError, ScenarioError
    from loadtest.session import ResultWriteError

    try:
        return loop.run(go())
    except ScenarioError as exc:
        usage_error(*exc.problems)
    except OutputError as exc:
        usage_error(str(exc))
    except ResultWriteError as exc:
        error(str(exc))
        if exc.saved_to:
            error(f"the result was saved to {exc.saved_to} instead")
        raise typer.Exit(exit_codes.OUTPUT) from None
    except (BackendError, LoadtestError) as exc:
        error(str(exc))
        raise typer.Exit(exit_codes.FAILED) from None
