"""A session: a loaded backend that runs one or more points (a run, a sweep, repeats), and
each point in its stages: started (everything before t0, bounded), measured (the runner or the
worker processes, with the samplers and the profile window around it), built (one complete
document), written."""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from loadtest.analysis.sla import evaluate
from loadtest.backends.base import Backend
from loadtest.config.loading import LoadedScenario, resolve_path
from loadtest.config.objectives import Sla
from loadtest.config.scenario import Scenario
from loadtest.core import rundir, secrets
from loadtest.core.clock import Clock
from loadtest.core.errors import BackendError
from loadtest.core.text import visible
from loadtest.execution.answer_check import AnswerCheck, reference_pass
from loadtest.execution.live import LiveWants
from loadtest.execution.runner import Runner, RunOutcome
from loadtest.execution.workers import WorkerGroup
from loadtest.reporters.progress import Display
from loadtest.results.build import build_result
from loadtest.results.finish import Observed
from loadtest.results.model import RunMetrics, Verdict
from loadtest.results.runset import Evidence
from loadtest.session.live_metrics import SessionMetrics
from loadtest.session.loaded_backend import LoadedBackend
from loadtest.session.signals import StopOnSignals
from loadtest.session.telemetry import gpu_off_reason, gpu_sampler, gpu_scope, server_sampler
from loadtest.session.traces import SessionTraces
from loadtest.session.worker_points import WorkerPoints
from loadtest.session.writing import RunResult, write_exports, write_result, write_side_files
from loadtest.telemetry import environment
from loadtest.telemetry.environment_section import Environment
from loadtest.telemetry.profile_window import ProfileWindow
from loadtest.workload.datasets import DatasetRows
from loadtest.workload.plan import Plan, build_plan

if TYPE_CHECKING:
    from loadtest.telemetry.gpu_section import GpuSource

_T = TypeVar("_T")


@dataclass
class _Started:
    """A point ready at t0: its plan (None where worker processes hold it), how many requests
    it plans, the backend's facts, and the environment as it was at the start."""

    plan: Plan | None
    planned: int | None
    details: dict
    environment: Environment


class Session(StopOnSignals):
    """A loaded backend that runs one or more points (a run, a sweep, repeats) without reloading.

    Between points, a backend whose spec changes only in settings it can take live (the
    batcher's size and wait, say) is reconfigured; any other change reloads it. With
    ``load.workers`` > 1 each point runs in worker processes of its own, each with its own
    backend (``execution.workers``); this process only coordinates, samples and writes.

    With ``handle_signals``, SIGINT, SIGTERM and SIGHUP stop whatever is under way (loading,
    warm-up or the run), the partial result is written with ``status: interrupted`` and the
    process exits 128 + the signal's number; later signals change nothing (the result is
    written however many come), and a stop that cannot finish within ``grace_s`` exits anyway.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        progress: Display | None = None,
        handle_signals: bool = False,
        grace_s: float = 15.0,
    ) -> None:
        self.clock, self.progress, self.handle_signals = clock, progress, handle_signals
        self.grace_s = grace_s
        # the in-process backend, between points; its start said where progress is shown
        self.loaded = LoadedBackend(clock, say=_stderr_line if progress is not None else None)
        self.interrupted_by: str | None = None
        self._runner: Runner | WorkerGroup | None = None
        self._workers = WorkerPoints(clock)  # points in worker processes or Ray actors
        self._starting: asyncio.Future | None = None
        self._restore_signals: Callable[[], None] | None = None
        self._name: str | None = None  # what was loaded, for the result
        self.metrics = SessionMetrics()  # a live metrics endpoint, once a point asks for one
        self.traces = SessionTraces(clock)  # request spans, once a point asks for them
        self._answers: AnswerCheck | None = None  # answers: the point's references

    async def close(self) -> dict:
        """Stop the backend (if loaded) and restore signal handlers; returns the backend's last
        facts. A live metrics endpoint serves its final figures until scraped once more."""
        facts = await self._release()
        await self.traces.close()
        await self.metrics.close()
        return facts

    async def _release(self) -> dict:
        """The backend and workers stopped, the signal handlers restored (a failed point)."""
        if self._restore_signals is not None:
            self._restore_signals()
            self._restore_signals = None
        await self._workers.close()
        return await self.loaded.close()

    @property
    def backend(self) -> Backend | None:
        return self.loaded.backend

    # -- one point ----------------------------------------------------------------------------

    async def _start(self, loaded: LoadedScenario) -> tuple[Plan | None, int | None, dict]:
        """Backend loaded and warmed, plan built: everything before t0. Returns the plan (None
        where worker processes hold it), how many requests it plans, and the backend's facts."""
        scenario = loaded.scenario
        if scenario.load.workers > 1 or scenario.load.ray is not None:
            await self.loaded.close()  # an in-process one from an earlier point is not used
            ready, details = await self._workers.start(loaded)
            self._name = ready.name
            for notice in ready.notices:
                sys.stderr.write(f"loadtest: {visible(secrets.scrub(notice))}\n")
            return None, ready.planned, {**ready.details, **details}
        info = await self.loaded.ensure(loaded, self.traces.ratio)
        assert self.backend is not None
        self._name = info.name
        plan = build_plan(scenario, info.tokenizer, lambda name: resolve_path(loaded, name))
        details = {**info.details, "traffic": plan.describe()}
        if isinstance(plan.dataset, DatasetRows) and plan.dataset.cut:
            details["dataset_rows"] = len(plan.dataset)
            details["dataset_rows_cut"] = plan.dataset.cut
        details.update(await self.backend.prepare(plan))
        self._answers = None
        if scenario.answers is not None:  # before t0, inside the start's deadline
            self._answers = await reference_pass(scenario, plan, self.backend, info.tokenizer)
        return plan, plan.planned_count, details

    async def run_point(
        self,
        loaded: LoadedScenario,
        out_dir,
        *,
        overwrite: bool = False,
        claimed: bool = False,
        metrics_as: tuple[str, str] | None = None,
    ) -> RunResult:
        """One run into ``out_dir`` (claimed here, before anything loads, unless ``claimed``):
        started, measured, built, written. ``metrics_as``: the run and point labels of its live
        metrics (a sweep's name and the point's parameters; default the run directory's name)."""
        scenario = loaded.scenario
        self._install_signals()
        secrets.register(*scenario.backend.secret_values())
        out = _run_dir(scenario, out_dir, overwrite, claimed)
        self.metrics.begin(scenario, *(metrics_as or (out.name, "")))
        self.traces.begin(scenario, *(metrics_as or (out.name, "")))
        started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")  # a label
        started = await self._start_point(loaded)
        if isinstance(started, str):  # why it did not start: the result says so
            result = build_result(
                scenario=scenario,
                scenario_path=str(loaded.path),
                outcome=None,
                backend={"kind": scenario.backend.kind, "error": started},
                environment=_environment(loaded),
                planned=_estimate(scenario),
                started_at=started_at,
                interrupted_by=self.interrupted_by,
                start_failure=started,
            )
            write_result(out, result)
            self.metrics.done(None, result)
            return RunResult(out, result)
        outcome, facts, seen = await self._measure(loaded, started, out)
        result = build_result(
            scenario=scenario,
            scenario_path=str(loaded.path),
            outcome=outcome,
            backend={"kind": scenario.backend.kind, "name": self._name, **started.details, **facts},
            environment=started.environment,
            planned=started.planned,
            started_at=started_at,
            interrupted_by=self.interrupted_by,
            seen=seen,
            judge=None if scenario.sla is None else _sla_judge(scenario.sla),
        )
        write_result(out, result)  # first: whatever fails after it, the result is there
        self.metrics.done(outcome, result)
        return RunResult(out, write_exports(out, result, outcome))

    async def _start_point(self, loaded: LoadedScenario) -> _Started | str:
        """Everything before t0, bounded by ``backend.start_timeout``; why not, as text, when
        the backend did not start or a signal came first."""
        timeout_s = loaded.scenario.backend.start_timeout / 1e9
        try:
            if self.interrupted_by is not None:
                raise asyncio.CancelledError
            self._starting = asyncio.ensure_future(asyncio.wait_for(self._start(loaded), timeout_s))
            plan, planned, details = await self._starting
            # at start: the processes already on the GPU are part of it
            return _Started(plan, planned, details, _environment(loaded))
        except (BackendError, asyncio.TimeoutError, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and self.interrupted_by is None:
                raise
            await self._release()
            return _start_failure(exc, self.interrupted_by, timeout_s)
        finally:
            self._starting = None

    async def _measure(
        self, loaded: LoadedScenario, started: _Started, out: Path
    ) -> tuple[RunOutcome, dict, Observed]:
        """The run itself, with the samplers and the profile window around it: its outcome, the
        backend's facts of the point, and what was seen (side files written)."""
        scenario, plan = loaded.scenario, started.plan
        sampler = gpu_sampler(scenario, loaded.base_dir)
        server = server_sampler(scenario, loaded.base_dir)
        window = self._profile_window(scenario, out)
        try:
            if plan is None:
                outcome, facts = await self._run_workers(sampler)
            else:
                outcome = await self._run(plan, scenario, window, sampler)
        finally:
            if sampler:
                await asyncio.to_thread(sampler.stop)
            if server:
                # a signal's stop writes the result now: no last scrape of the server
                await asyncio.to_thread(server.stop, self.interrupted_by is None)
        if plan is not None:
            assert self.backend is not None
            try:
                facts = await self.backend.point_facts()
            except BackendError as exc:
                facts = {"error": str(exc)}
        if plan is None:
            await self._workers.close_group()  # each point starts its own workers
        elif outcome.status == "failed":
            facts.update(await self._release())
        seen = Observed(
            environment=started.environment,
            gpu=sampler,
            gpu_off_reason=gpu_off_reason(scenario) or "not sampled",
            gpu_scope=gpu_scope(scenario),
            profile=window,
            profile_export=facts.pop("profile_export", {}),
            server=server,
            file_problems=write_side_files(out, outcome.t0_ns, sampler, server),
            notes=_dataset_notes(started.details),
        )
        return outcome, facts, seen

    async def _run_workers(self, sampler: GpuSource | None) -> tuple[RunOutcome, dict]:
        """The point in the worker processes: t0 sent, their outcomes merged."""
        group = self._workers.group
        assert group is not None
        group.wants = LiveWants(percentiles=self.progress is not None, totals=self.metrics.totals)
        return await self._drive(group, group.run, sampler)

    async def _run(
        self,
        plan: Plan,
        scenario: Scenario,
        window: ProfileWindow | None,
        sampler: GpuSource | None,
    ) -> RunOutcome:
        info = self.loaded.info
        assert self.backend is not None and info is not None  # started: _start
        goodput = scenario.goodput
        runner = Runner(
            plan,
            self.backend,
            info.tokenizer,
            self.clock,
            scenario.load,
            scenario.outputs.interval,
            keep_records=scenario.outputs.requests_jsonl,
            profile=window,
            goodput=None if goodput is None else (goodput.ttft, goodput.tpot, goodput.e2e),
            trace=self.traces.hook,
            answers=self._answers,
        )
        return await self._drive(runner, runner.run, sampler)

    async def _drive(
        self,
        runner: Runner | WorkerGroup,
        run: Callable[[], Awaitable[_T]],
        sampler: GpuSource | None,
    ) -> _T:
        """``run`` with ``runner`` the one a signal stops, its live progress shown and its GPU
        utilisation read from ``sampler``."""
        if sampler is not None:
            runner.gpu_probe = sampler.latest_utilization
        self._runner = runner
        self.metrics.watch(runner, self._name)
        if self.interrupted_by is not None:  # a signal between points
            runner.request_stop("interrupted")
        progress_task = asyncio.create_task(self.progress(runner)) if self.progress else None
        try:
            return await run()
        finally:
            self._runner = None
            if progress_task:
                progress_task.cancel()
                await asyncio.gather(progress_task, return_exceptions=True)

    def _profile_window(self, scenario: Scenario, out: Path) -> ProfileWindow | None:
        if scenario.profile is None or self.backend is None:
            return None
        return ProfileWindow(scenario.profile, self.backend, self.clock, out)


def _run_dir(scenario, out_dir, overwrite: bool, claimed: bool) -> Path:
    """The run directory, claimed now, before anything loads: ``out_dir`` (``--out``) when
    given, else ``outputs.dir``, else a fresh ``reports/<name>-<time>``."""
    if claimed:
        return Path(out_dir)
    if out_dir is None and not scenario.outputs.dir:
        return rundir.default_dir(scenario.name)  # created exclusively: never another run's
    return rundir.claim(Path(out_dir if out_dir is not None else scenario.outputs.dir), overwrite)


def _environment(loaded: LoadedScenario) -> Environment:
    return environment.collect(loaded.scenario.seeds.model_dump(), loaded.sha256)


def _estimate(scenario) -> int | None:
    planned = scenario.load.planned_estimate()
    return None if planned is None else round(planned)


def _sla_judge(sla: Sla) -> Callable[[RunMetrics], Verdict | None]:
    return lambda result: evaluate(sla, Evidence.of_run(result))


def _dataset_notes(details: dict) -> list[str]:
    if not details.get("dataset_rows_cut"):
        return []
    return [
        f"the dataset held {details['dataset_rows_cut']} rows past "
        f"workload.dataset_max_rows: the plan drew from its first "
        f"{details['dataset_rows']} (raise the limit to use more)"
    ]


def _start_failure(exc: BaseException, interrupted_by: str | None, timeout_s: float) -> str:
    if interrupted_by is not None:
        return f"interrupted by {interrupted_by} before the run started"
    if isinstance(exc, asyncio.TimeoutError):
        return (
            f"the backend was not ready within {timeout_s:g} s (backend.start_timeout): "
            "the system under test did not answer"
        )
    return f"backend failed to start: {exc}"


def _stderr_line(line: str) -> None:
    sys.stderr.write(line + "\n")
