"""Wiring: scenario -> backend -> plan -> runner -> metrics.json (+ SLA verdict).

This is the Python API the CLI calls; a notebook can call ``run_scenario`` the same way.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.analysis.sla import evaluate
from loadtest.backends import create_backend
from loadtest.backends.base import Backend, BackendInfo
from loadtest.config.loading import LoadedScenario, resolve_path
from loadtest.core import atomic, exit_codes, rundir, secrets
from loadtest.core.clock import Clock, MonotonicClock
from loadtest.core.errors import BackendError, LoadtestError
from loadtest.core.text import visible
from loadtest.execution.runner import Runner, RunOutcome
from loadtest.execution.workers import WorkerGroup, process_channels
from loadtest.results.build import build_result
from loadtest.results.finish import Observed
from loadtest.results.model import RunMetrics
from loadtest.results.runset import Evidence
from loadtest.telemetry import environment
from loadtest.workload.datasets import DatasetRows
from loadtest.workload.plan import Plan, build_plan


@dataclass
class RunResult:
    """A finished run: where it was written, and what (``metrics.json`` as a typed model)."""

    out_dir: Path
    result: RunMetrics

    @property
    def metrics(self) -> dict:
        """``metrics.json`` as the JSON-shaped mapping it was written as."""
        return self.result.view()

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def sla_verdict(self) -> str | None:
        return None if self.result.sla is None else self.result.sla.verdict


@dataclass
class _Started:
    """A point ready at t0: its plan (None where worker processes hold it), how many requests
    it plans, the backend's facts, and the environment as it was at the start."""

    plan: Plan | None
    planned: int | None
    details: dict
    environment: dict


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
    return asyncio.run(
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


class Session:
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
        self, clock: Clock, *, progress=None, handle_signals: bool = False, grace_s: float = 15.0
    ) -> None:
        self.clock, self.progress, self.handle_signals = clock, progress, handle_signals
        self.grace_s = grace_s
        self.backend: Backend | None = None
        self.info: BackendInfo | None = None
        self.spec: Any = None
        self.interrupted_by: str | None = None
        self._runner: Runner | WorkerGroup | None = None
        self._group: WorkerGroup | None = None
        self._starting: asyncio.Future | None = None
        self._restore_signals: Callable[[], None] | None = None
        self._name: str | None = None  # what was loaded, for the result
        self._ray: Any = None  # a RayCluster, connected at the first point that asks for one

    async def close(self) -> dict:
        """Stop the backend (if loaded) and restore signal handlers; returns the backend's last facts."""
        if self._restore_signals is not None:
            self._restore_signals()
            self._restore_signals = None
        await self._close_group()
        if self._ray is not None:
            ray, self._ray = self._ray, None
            await asyncio.to_thread(ray.disconnect)
        return await self._close_backend()

    async def _close_group(self) -> None:
        if self._group is not None:
            group, self._group = self._group, None
            await group.close()

    async def _close_backend(self) -> dict:
        if self.backend is None:
            return {}
        backend, self.backend, self.info, self.spec = self.backend, None, None, None
        return await backend.stop()

    # -- signals ------------------------------------------------------------------------------

    def _install_signals(self) -> None:
        if not self.handle_signals or self._restore_signals is not None:
            return
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

        def restore() -> None:
            for sig in installed:
                loop.remove_signal_handler(sig)
                if self.interrupted_by is not None:
                    # the process is on its way out with the result written: a late signal
                    # (a second from `timeout`) must not kill it mid-report with another code
                    signal.signal(sig, signal.SIG_IGN)

        self._restore_signals = restore

    def _on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        code = exit_codes.SIGNALS.get(name, exit_codes.INTERRUPTED)
        if self.interrupted_by is not None:
            # already stopping: however many signals come (coreutils `timeout` sends two, to
            # the process and to its group), the partial result is written first; the grace
            # timer bounds the wait
            sys.stderr.write(
                f"\nloadtest: {name}: already stopping; writing the partial result "
                f"(at most {self.grace_s:g} s)\n"
            )
            return
        self.interrupted_by = name
        sys.stderr.write(f"\nloadtest: {name}: stopping and writing the partial result\n")
        if self._runner is not None:
            self._runner.request_stop("interrupted")
        if self._starting is not None:
            self._starting.cancel()
        timer = threading.Timer(self.grace_s, _give_up, (name, code, self.grace_s))
        timer.daemon = True
        timer.start()

    # -- one point ----------------------------------------------------------------------------

    async def _ensure_backend(self, loaded: LoadedScenario) -> None:
        spec = loaded.scenario.backend
        if self.backend is not None and spec != self.spec:
            if not await self.backend.reconfigure(spec):
                await self._close_backend()  # not close(): the signal handlers stay
            else:
                self.spec = spec
        if self.backend is None:
            self.backend = create_backend(spec, self.clock, {"base_dir": loaded.base_dir})
            self.info = await self.backend.start()  # BackendError propagates: nothing loaded
            self.spec = spec
            for notice in self.info.notices:  # before t0: the user reads it before the numbers
                sys.stderr.write(f"loadtest: {visible(secrets.scrub(notice))}\n")

    async def _start(self, loaded: LoadedScenario) -> tuple[Plan | None, int | None, dict]:
        """Backend loaded and warmed, plan built: everything before t0. Returns the plan (None
        where worker processes hold it), how many requests it plans, and the backend's facts."""
        scenario = loaded.scenario
        if scenario.load.workers > 1 or scenario.load.ray is not None:
            await self._close_backend()  # an in-process one from an earlier point is not used
            details: dict = {"workers": scenario.load.workers}
            if scenario.load.ray is not None:
                channels = await self._ray_channels(loaded)
                details["ray"] = self._ray.facts
            else:
                channels = process_channels(loaded)
            self._group = WorkerGroup(loaded, self.clock, channels)
            ready = await self._group.start(scenario.backend.start_timeout / 1e9)
            self._name = ready.name
            for notice in ready.notices:
                sys.stderr.write(f"loadtest: {visible(secrets.scrub(notice))}\n")
            return None, ready.planned, {**ready.details, **details}
        await self._ensure_backend(loaded)
        assert self.backend is not None and self.info is not None
        self._name = self.info.name
        plan = build_plan(scenario, self.info.tokenizer, lambda name: resolve_path(loaded, name))
        details = dict(self.info.details)
        if isinstance(plan.dataset, DatasetRows) and plan.dataset.cut:
            details["dataset_rows"] = len(plan.dataset)
            details["dataset_rows_cut"] = plan.dataset.cut
        details.update(await self.backend.prepare(plan))
        return plan, plan.planned_count, details

    async def _ray_channels(self, loaded: LoadedScenario) -> list:
        """Actors on the scenario's Ray cluster (connected once a session)."""
        from loadtest.execution.ray_workers import RayCluster, ray_channels

        address = loaded.scenario.load.ray
        assert address is not None  # only asked for with load.ray
        if self._ray is not None and self._ray.address != address:
            await asyncio.to_thread(self._ray.disconnect)
            self._ray = None
        if self._ray is None:
            cluster = RayCluster(address)
            await cluster.connect()
            self._ray = cluster
        return await ray_channels(self._ray, loaded)

    async def run_point(
        self, loaded: LoadedScenario, out_dir, *, overwrite: bool = False, claimed: bool = False
    ) -> RunResult:
        """One run into ``out_dir`` (claimed here, before anything loads, unless ``claimed``):
        started, measured, built, written."""
        scenario = loaded.scenario
        self._install_signals()
        secrets.register(*scenario.backend.secret_values())
        out = _run_dir(scenario, out_dir, overwrite, claimed)
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
            _write_result(out, result)
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
        _write_result(out, result)  # first: whatever fails after it, the result is there
        return RunResult(out, _write_exports_of(out, result, outcome))

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
            await self.close()
            return _start_failure(exc, self.interrupted_by, timeout_s)
        finally:
            self._starting = None

    async def _measure(
        self, loaded: LoadedScenario, started: _Started, out: Path
    ) -> tuple[RunOutcome, dict, Observed]:
        """The run itself, with the samplers and the profile window around it: its outcome, the
        backend's facts of the point, and what was seen (side files written)."""
        scenario, plan = loaded.scenario, started.plan
        sampler = _sampler(scenario)
        server = _server_sampler(scenario)
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
                await asyncio.to_thread(server.stop)
        if plan is not None:
            assert self.backend is not None
            try:
                facts = await self.backend.point_facts()
            except BackendError as exc:
                facts = {"error": str(exc)}
        if plan is None:
            await self._close_group()  # each point starts its own workers
        elif outcome.status == "failed":
            facts.update(await self.close())
        seen = Observed(
            environment=started.environment,
            gpu=sampler,
            gpu_off_reason=_gpu_off_reason(scenario) or "not sampled",
            gpu_scope=_gpu_scope(scenario),
            profile=window,
            profile_export=facts.pop("profile_export", {}),
            server=server,
            file_problems=_write_side_files(out, outcome.t0_ns, sampler, server),
            notes=_dataset_notes(started.details),
        )
        return outcome, facts, seen

    async def _run_workers(self, gpu_sampler=None) -> tuple[RunOutcome, dict]:
        """The point in the worker processes: t0 sent, their outcomes merged."""
        group = self._group
        assert group is not None
        if gpu_sampler is not None:
            group.gpu_probe = gpu_sampler.latest_utilization
        self._runner = group
        group.live_percentiles = self.progress is not None
        if self.interrupted_by is not None:
            group.request_stop("interrupted")
        progress_task = asyncio.create_task(self.progress(group)) if self.progress else None
        try:
            return await group.run()
        finally:
            self._runner = None
            if progress_task:
                progress_task.cancel()
                await asyncio.gather(progress_task, return_exceptions=True)

    def _profile_window(self, scenario, out: Path):
        if scenario.profile is None:
            return None
        from loadtest.telemetry.profile_window import ProfileWindow

        return ProfileWindow(scenario.profile, self.backend, self.clock, out)

    async def _run(self, plan, scenario, window=None, gpu_sampler=None):
        assert self.info is not None  # started: _ensure_backend
        runner = Runner(
            plan,
            self.backend,
            self.info.tokenizer,
            self.clock,
            scenario.load,
            scenario.outputs.interval,
            keep_records=scenario.outputs.requests_jsonl,
            profile=window,
            goodput=None
            if scenario.goodput is None
            else (scenario.goodput.ttft, scenario.goodput.tpot, scenario.goodput.e2e),
        )
        if gpu_sampler is not None:
            runner.gpu_probe = gpu_sampler.latest_utilization
        self._runner = runner
        if self.interrupted_by is not None:  # a signal between points
            runner.request_stop("interrupted")
        progress_task = asyncio.create_task(self.progress(runner)) if self.progress else None
        try:
            return await runner.run()
        finally:
            self._runner = None
            if progress_task:
                progress_task.cancel()
                await asyncio.gather(progress_task, return_exceptions=True)


def _run_dir(scenario, out_dir, overwrite: bool, claimed: bool) -> Path:
    """The run directory, claimed now, before anything loads: ``out_dir`` (``--out``) when
    given, else ``outputs.dir``, else a fresh ``reports/<name>-<time>``."""
    if claimed:
        return Path(out_dir)
    if out_dir is None and not scenario.outputs.dir:
        return default_out_dir(scenario.name)  # created exclusively: never another run's
    return rundir.claim(Path(out_dir if out_dir is not None else scenario.outputs.dir), overwrite)


def _environment(loaded: LoadedScenario) -> dict:
    return environment.collect(loaded.scenario.seeds.model_dump(), loaded.sha256)


def _estimate(scenario) -> int | None:
    planned = scenario.load.planned_estimate()
    return None if planned is None else round(planned)


def _sla_judge(sla) -> Callable[[RunMetrics], Any]:
    return lambda result: evaluate(sla, Evidence.of_run(result))


def _gpu_scope(scenario) -> str:
    """Whose GPUs the sampled ones are: a served model's may be elsewhere, never labelled as its."""
    if scenario.backend.kind == "openai":
        return "this host (the load generator's); the server's own GPUs are not sampled"
    return "this host (the engine's)"


def _dataset_notes(details: dict) -> list[str]:
    if not details.get("dataset_rows_cut"):
        return []
    return [
        f"the dataset held {details['dataset_rows_cut']} rows past "
        f"workload.dataset_max_rows: the plan drew from its first "
        f"{details['dataset_rows']} (raise the limit to use more)"
    ]


def _write_side_files(out: Path, t0_ns: int, gpu, server) -> dict[str, str]:
    """gpu.csv and server.csv, written before metrics.json: one that cannot be written (a full
    disk) is a warning in the result, never a lost result. Returns why each failed."""
    writes: list[tuple[str, Callable[[Path], object]]] = []
    if gpu is not None and gpu.rows:
        writes.append(("gpu.csv", lambda p: atomic.write_text(p, gpu.csv_text(t0_ns))))
    if server is not None and server.rows:
        from loadtest.telemetry.server_metrics import CSV_COLUMNS

        rows = server.csv_rows(t0_ns)
        writes.append(("server.csv", lambda p: atomic.write_csv(p, rows, CSV_COLUMNS)))
    problems = {}
    for name, write in writes:
        try:
            write(out / name)
        except OSError as exc:
            problems[name] = str(exc.strerror or exc)
    return problems


def _write_exports_of(out: Path, result: RunMetrics, outcome: RunOutcome) -> RunMetrics:
    """The per-request exports, after metrics.json; when one cannot be written the result,
    rewritten, says so."""
    records = outcome.recorder.records
    if records is None:
        return result
    problem = _write_exports(out, records)
    if not problem:
        return result
    sys.stderr.write(f"loadtest: {visible(secrets.scrub(problem))}\n")
    validity = result.validity.model_copy(update={"warnings": [*result.validity.warnings, problem]})
    result = result.model_copy(update={"validity": validity})
    _write_result(out, result)
    return result


def _gpu_off_reason(scenario) -> str | None:
    """Why this host's GPUs are not sampled, or None when they are."""
    gpu = scenario.telemetry.gpu
    if gpu is False:
        return "telemetry.gpu: false"
    if gpu == "auto" and scenario.backend.kind == "openai":
        from urllib.parse import urlsplit

        host = (urlsplit(scenario.backend.base_url).hostname or "").lower()
        if host not in ("localhost", "127.0.0.1", "::1", "0.0.0.0") and host not in _own_names():
            return (
                f"the server ({host}) is not on this host: its GPUs are not these "
                "(telemetry.gpu: true samples this host's anyway)"
            )
    return None


def _own_names() -> set[str]:
    import socket

    names = {socket.gethostname().lower(), socket.getfqdn().lower()}
    return names


def _server_sampler(scenario):
    """A started sampler of the server's /metrics, or None (not an openai backend, or off)."""
    wanted = scenario.telemetry.server
    if wanted is False or scenario.backend.kind != "openai":
        return None
    from loadtest.backends.openai.discovery import without_credentials
    from loadtest.telemetry.server_metrics import ServerSampler, metrics_url

    sampler = ServerSampler(
        metrics_url(without_credentials(scenario.backend.base_url)),
        scenario.telemetry.server_interval / 1e9,
    )
    sampler.start()
    return sampler


def _sampler(scenario):
    """A started GPU sampler, or None when the scenario turns sampling off."""
    if _gpu_off_reason(scenario) is not None:
        return None
    from loadtest.telemetry.gpu_sampler import GpuSampler

    sampler = GpuSampler(scenario.telemetry.interval / 1e9, devices=scenario.telemetry.devices)
    sampler.start()
    return sampler


def _write_exports(out: Path, records: list[dict]) -> str | None:
    """requests.jsonl, .csv and .parquet; why not, when a file cannot be written (a full disk):
    the others are still tried, and metrics.json, written before, says so."""
    columns = [k for k in records[0] if k != "token_ns"] if records else []
    writes: list[tuple[str, Callable[[Path], object]]] = [
        ("requests.jsonl", lambda p: atomic.write_jsonl(p, records)),
        ("requests.csv", lambda p: atomic.write_csv(p, records, columns)),
    ]
    if records:
        writes.append(("requests.parquet", lambda p: atomic.write_parquet(p, records)))
    failed = []
    for name, write in writes:
        try:
            write(out / name)
        except OSError as exc:
            failed.append(f"{name} ({exc.strerror or exc})")
    if not failed:
        return None
    return "the per-request exports could not all be written: " + ", ".join(failed)


class ResultWriteError(LoadtestError):
    """The run finished but metrics.json could not be written; ``saved_to`` says where it went."""

    def __init__(self, message: str, saved_to: Path | None) -> None:
        super().__init__(message)
        self.saved_to = saved_to


def _write_result(out: Path, result: RunMetrics) -> None:
    """metrics.json, atomically. When that fails (disk full, folder removed), the result is
    kept in the temp folder if possible, and the error says where."""
    doc = result.view()  # written through write_json: every string value is scrubbed of secrets
    try:
        atomic.write_json(out / "metrics.json", doc)
        return
    except OSError as exc:
        problem = f"{out / 'metrics.json'}: could not write the result: {exc.strerror or exc}"
    fallback = (
        Path(tempfile.gettempdir()) / f"loadtest-{rundir.safe_name(out.name)}-{os.getpid()}.json"
    )
    try:
        atomic.write_json(fallback, doc)
    except OSError:
        fallback = None  # type: ignore[assignment]
    raise ResultWriteError(problem, fallback)


def _give_up(name: str, code: int, grace_s: float) -> None:
    sys.stderr.write(
        f"loadtest: {name}: could not stop within {grace_s:g} s; exiting without writing a result\n"
    )
    os._exit(code)


def _start_failure(exc: BaseException, interrupted_by: str | None, timeout_s: float) -> str:
    if interrupted_by is not None:
        return f"interrupted by {interrupted_by} before the run started"
    if isinstance(exc, asyncio.TimeoutError):
        return (
            f"the backend was not ready within {timeout_s:g} s (backend.start_timeout): "
            "the system under test did not answer"
        )
    return f"backend failed to start: {exc}"
