"""The Python API the CLI calls; a notebook can call ``run_scenario`` the same way."""

from __future__ import annotations

from pathlib import Path

from loadtest.config.loading import LoadedScenario
from loadtest.core import loop, rundir
from loadtest.core.clock import Clock, MonotonicClock
from loadtest.session.point import Session
from loadtest.session.writing import RunResult


def default_out_dir(name: str) -> Path:
    """``reports/<safe name>-<UTC time>[-N]``, created now (never shared with another run)."""
    return rundir.default_dir(name)


def run_scenario(
    loaded: LoadedScenario,
    out_dir: str | Path | None = None,
    *,
    clock: Clock | None = None,
    progress=None,
    handle_signals: bool = False,
    overwrite: bool = False,
) -> RunResult:
    """Run on a fresh event loop (the real clock unless one is given); write the run directory."""
    return loop.run(
        run_scenario_async(
            loaded,
            out_dir,
            clock=clock or MonotonicClock(),
            progress=progress,
            handle_signals=handle_signals,
            overwrite=overwrite,
        )
    )


async def run_scenario_async(
    loaded: LoadedScenario,
    out_dir,
    *,
    clock: Clock,
    progress=None,
    handle_signals: bool = False,
    overwrite: bool = False,
) -> RunResult:
    """``run_scenario`` on a running event loop with the given clock (the virtual clock in tests)."""
    session = Session(clock, progress=progress, handle_signals=handle_signals)
    try:
        return await session.run_point(loaded, out_dir, overwrite=overwrite)
    finally:
        await session.close()
