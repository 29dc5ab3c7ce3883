"""Wiring: scenario -> backend -> plan -> runner -> metrics.json (+ SLA verdict).

This is the Python API the CLI calls; a notebook can call ``run_scenario`` the same way.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
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
from loadtest.results.build import build_result, null_non_finite
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
        """One run into ``out_dir`` (claimed here, before anything loads, unless ``claimed``)."""
        scenario = loaded.scenario
        self._install_signals()
        secrets.register(*scenario.backend.secret_values())
        out = _run_dir(scenario, out_dir, overwrite, claimed)
        started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")  # a label
        env_facts = lambda: environment.collect(scenario.seeds.model_dump(), loaded.sha256)  # noqa: E731
        timeout_s = scenario.backend.start_timeout / 1e9
        try:
            if self.interrupted_by is not None:
                raise asyncio.CancelledError
            self._starting = asyncio.ensure_future(asyncio.wait_for(self._start(loaded), timeout_s))
            plan, planned, details = await self._starting
            env = env_facts()  # at start: the processes already on the GPU are part of it
        except (BackendError, asyncio.TimeoutError, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and self.interrupted_by is None:
                raise
            reason = _start_failure(exc, self.interrupted_by, timeout_s)
            await self.close()
            planned = scenario.load.planned_estimate()
            result = build_result(
                scenario=scenario,
                scenario_path=str(loaded.path),
                outcome=None,
                backend={"kind": scenario.backend.kind, "error": reason},
                environment=env_facts(),
                planned=None if planned is None else round(planned),
                started_at=started_at,
                interrupted_by=self.interrupted_by,
                start_failure=reason,
            )
            _write_result(out, result)
            return RunResult(out, result)
        finally:
            self._starting = None
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
        profile_export = facts.pop("profile_export", {})
        result = build_result(
            scenario=scenario,
            scenario_path=str(loaded.path),
            outcome=outcome,
            backend={
                "kind": scenario.backend.kind,
                "name": self._name,
                **details,
                **facts,
            },
            environment=env,
            planned=planned,
            started_at=started_at,
            interrupted_by=self.interrupted_by,
        )
        _add_inside_sections(result, scenario, outcome, env, sampler, window, profile_export, out)
        if details.get("dataset_rows_cut"):
            result.validity.warnings.append(
                f"the dataset held {details['dataset_rows_cut']} rows past "
                f"workload.dataset_max_rows: the plan drew from its first "
                f"{details['dataset_rows']} (raise the limit to use more)"
            )
        if server is not None:
            _add_server_section(result, outcome, server, out)
        if scenario.sla is not None:
            result.sla = evaluate(scenario.sla, Evidence.of_run(result))
        result = null_non_finite(result)
        _write_result(out, result)  # first: whatever fails after it, the result is there
        if outcome.recorder.records is not None:
            problem = _write_exports(out, outcome.recorder.records)
            if problem:
                sys.stderr.write(f"loadtest: {visible(secrets.scrub(problem))}\n")
                result.validity.warnings.append(problem)
                _write_result(out, result)
        return RunResult(out, result)

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


def _add_inside_sections(
    result: RunMetrics,
    scenario,
    outcome,
    env: dict,
    sampler,
    window,
    profile_export: dict,
    out: Path,
) -> None:
    """``gpu`` (and gpu.csv), the environment's warnings, ``profile``, ``roofline``."""
    rec = outcome.recorder
    if sampler:
        span = (rec.window_start, rec.window_end) if rec.window_start and rec.window_end else None
        result.gpu = sampler.summary(outcome.t0_ns, span, rec.window_tokens)
        if result.gpu.get("available"):
            # whose GPUs these are: a served model's may be elsewhere, never labelled as its
            result.gpu["scope"] = (
                "this host (the load generator's); the server's own GPUs are not sampled"
                if scenario.backend.kind == "openai"
                else "this host (the engine's)"
            )
        if sampler.rows:
            _side_file(
                result,
                out / "gpu.csv",
                lambda p: atomic.write_text(p, sampler.csv_text(outcome.t0_ns)),
            )
    else:
        result.gpu = {"available": False, "reason": _gpu_off_reason(scenario) or "not sampled"}
    result.validity.warnings += environment.warnings(env, result.gpu)
    if result.backend.get("recompiles_in_window"):
        result.validity.warnings.append(
            f"torch.compile built {result.backend['recompiles_in_window']} graph(s) inside the "
            "measurement window: those requests waited for a compilation (warm-up missed a shape)"
        )
    if result.backend.get("stamp_mismatches"):
        result.validity.warnings.append(
            f"{result.backend['stamp_mismatches']} batch(es) had a different number of token stamps than tokens "
            "generated: the per-step stamp hook did not match this transformers version; report it"
        )
    if window is not None:
        result.profile = {**window.summary(outcome.t0_ns, rec.profiled), **profile_export}
        result.requests.profiled = rec.profiled
        result.validity.warnings += window.warnings
        _judge_around_profiler(result, scenario, rec, window)
    result.roofline = _roofline(result.view(), env)


def _judge_around_profiler(result: RunMetrics, scenario, rec, window) -> None:
    """A profiler slows the engine while it records; near capacity the backlog that forms may
    take long to drain, or never does. That is the capture's cost, said in a warning, not an
    overloaded system: a run unsteady only because of it is judged on its window outside the
    capture and the backlog's drain, and said to be perturbed."""
    cost = window.perturbation(rec.t0)
    if cost is None:
        return
    b0, peak = cost["backlog_at_open"] or 0, cost["backlog_peak"]
    if peak <= b0 + 3 * math.sqrt(b0 + 1):  # no more than a queue's own wander
        return
    drained = (
        f"drained {cost['drain_s']:.3g} s after the capture closed"
        if cost["drain_s"] is not None
        else "had not drained by the end"
    )
    cost_text = (
        f"the profiler's capture lasted {cost['lasted_s']:.3g} s"
        + (f" for {cost['asked_s']:.3g} s asked" if cost["asked_s"] else "")
        + f" and raised the backlog from {b0} to {peak} requests, which {drained}; "
        f"{rec.profiled} requests sent until then are flagged"
        + (" and kept out of the figures" if window.spec.exclude_from_stats else "")
    )
    if result.stability is None or result.stability.steady:
        result.validity.warnings.append(cost_text)
        return
    outside = _judged_outside(scenario, rec, window)
    if outside is not None and not all(v.steady for v in outside):
        result.validity.warnings.append(cost_text)  # overloaded outside the capture too
        return
    note = f"perturbed by the profiler, not overloaded: {cost_text}; " + (
        "outside them the run was steady"
        if outside
        else "no part of the window was outside them to judge the run's steadiness on "
        "(open the capture later, or run longer); its figures are no steady state's"
    )
    base = outside[0] if outside else result.stability
    result.stability = base.model_copy(update={"reasons": [note], "steady": bool(outside)})
    result.validity.warnings = [
        note if w.startswith("overloaded:") else w for w in result.validity.warnings
    ]


def _judged_outside(scenario, rec, window) -> list | None:
    """Stability verdicts on the window's spans outside the capture and its drain (before it
    opened; after the backlog drained), each of at least five intervals; None when there is
    no such span."""
    from loadtest.results.stability import judge as judge_stability

    open_loop = scenario.load.arrival.kind != "concurrency"
    spans = [(rec.window_start, window.start_ns)]
    if window.drained_ns is not None:
        spans.append((window.drained_ns, rec.window_end))
    verdicts = [
        judge_stability(rec.timeline, a, b, rec.interval_ns, open_loop=open_loop)
        for a, b in spans
        if a is not None and b is not None and b - a >= 5 * rec.interval_ns
    ]
    judged = [v for v in verdicts if v is not None]
    return judged or None


def _roofline(metrics: dict, env: dict) -> dict | None:
    """MBU/MFU and a diagnosis, for in-process models (transformers)."""
    backend = metrics["backend"]
    acct, config = backend.get("roofline_acct"), backend.get("shape_config")
    if not acct or not config:
        return None
    from loadtest.telemetry import roofline

    estimated = None
    if not acct.get("decode_steps") and backend.get("mode") == "continuous":
        acct, estimated = roofline.estimate_from_latencies(metrics), roofline.ESTIMATED_NOTE
    shape = roofline.model_shape(config, backend["parameter_bytes"], backend["dtype_bytes"])
    name = backend.get("device_name")
    uuid = next((g.get("uuid") for g in env.get("gpus") or [] if g.get("name") == name), None)
    result = roofline.analyse(shape, acct, roofline.peaks_for(name, uuid))
    if estimated:
        result["estimated"] = estimated
    result["diagnosis"] = roofline.diagnose(result, metrics["gpu"], metrics.get("profile"))
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


def _add_server_section(result: RunMetrics, outcome, server, out: Path) -> None:
    """``server`` (and server.csv), with the server's TTFT beside the client's where it has one."""
    rec = outcome.recorder
    span = (rec.window_start, rec.window_end) if rec.window_start and rec.window_end else None
    summary = server.summary(outcome.t0_ns, span)
    compared = _ttft_compared(summary, rec.first_tokens, outcome.t0_ns)
    if compared is not None:
        summary["ttft_compared"] = compared
    result.server = summary
    if server.rows:
        from loadtest.telemetry.server_metrics import CSV_COLUMNS

        rows = server.csv_rows(outcome.t0_ns)
        _side_file(result, out / "server.csv", lambda p: atomic.write_csv(p, rows, CSV_COLUMNS))


def _ttft_compared(summary: dict, first_tokens: list[tuple[int, int]], t0_ns: int) -> dict | None:
    """The server's mean TTFT against the client's over the same requests: every request whose
    first token came between the two samples the server's figure is taken from (warm-up and
    profiled ones included, as the server's histogram has them)."""
    ttft = summary.get("metrics", {}).get("ttft_s")
    if not ttft or not ttft.get("window_count") or not first_tokens:
        return None
    start, end = (t0_ns + round(s * 1e9) for s in summary["sampled_s"])
    mine = [service for first, service in first_tokens if start < first <= end]
    if not mine:
        return None
    server_ms = ttft["window_mean"] * 1e3
    client_ms = sum(mine) / len(mine) / 1e6
    return {
        "server_mean_ms": server_ms,
        "server_requests": int(ttft["window_count"]),
        "client_service_mean_ms": client_ms,
        "client_requests": len(mine),
        "difference_ms": client_ms - server_ms,
        "note": "the same requests: those whose first token came between the two samples "
        "(warm-up and profiled ones included). The client's TTFT runs from its request's "
        "bytes leaving to the first token's chunk arriving; the server's (vLLM) from the "
        "request reaching its engine, after the HTTP server parsed it, to the first token "
        "leaving the engine, before it is framed and streamed. The difference is the network, "
        "HTTP parsing and the stream's delivery.",
    }


def _sampler(scenario):
    """A started GPU sampler, or None when the scenario turns sampling off."""
    if _gpu_off_reason(scenario) is not None:
        return None
    from loadtest.telemetry.gpu_sampler import GpuSampler

    sampler = GpuSampler(scenario.telemetry.interval / 1e9, devices=scenario.telemetry.devices)
    sampler.start()
    return sampler


def _side_file(result: RunMetrics, path: Path, write: Callable[[Path], object]) -> None:
    """A file beside metrics.json, written before it: one that cannot be written (a full disk)
    is a warning in the result, never a lost result."""
    try:
        write(path)
    except OSError as exc:
        result.validity.warnings.append(f"{path.name} could not be written: {exc.strerror or exc}")


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
