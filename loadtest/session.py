"""Wiring: scenario -> backend -> plan -> runner -> metrics.json (+ SLA verdict).

This is the Python API the CLI calls; a notebook can call ``run_scenario`` the same way.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from loadtest.analysis.sla import evaluate
from loadtest.backends import create_backend
from loadtest.config.loading import LoadedScenario, resolve_path
from loadtest.core import atomic
from loadtest.core.clock import Clock, MonotonicClock
from loadtest.core.errors import BackendError
from loadtest.execution.runner import Runner
from loadtest.results.build import build_metrics, null_non_finite
from loadtest.telemetry import environment
from loadtest.workload.plan import build_plan


@dataclass
class RunResult:
    out_dir: Path
    metrics: dict

    @property
    def status(self) -> str:
        return self.metrics["status"]

    @property
    def sla_verdict(self) -> str | None:
        sla = self.metrics.get("sla")
        return None if sla is None else sla["verdict"]


def default_out_dir(name: str) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("reports") / f"{name}-{stamp}"


def run_scenario(
    loaded: LoadedScenario,
    out_dir: str | Path | None = None,
    *,
    clock: Clock | None = None,
    progress=None,
    handle_signals: bool = False,
) -> RunResult:
    """Run on a fresh event loop (the real clock unless one is given); write the run directory."""
    return asyncio.run(
        run_scenario_async(
            loaded,
            out_dir,
            clock=clock or MonotonicClock(),
            progress=progress,
            handle_signals=handle_signals,
        )
    )


async def run_scenario_async(
    loaded: LoadedScenario, out_dir, *, clock: Clock, progress=None, handle_signals: bool = False
) -> RunResult:
    session = Session(clock, progress=progress, handle_signals=handle_signals)
    try:
        return await session.run_point(loaded, out_dir)
    finally:
        await session.close()


class Session:
    """A loaded backend that runs one or more points (a run, a sweep, repeats) without reloading.

    Between points, a backend whose spec changes only in settings it can take live (the
    batcher's size and wait, say) is reconfigured; any other change reloads it.
    """

    def __init__(self, clock: Clock, *, progress=None, handle_signals: bool = False) -> None:
        self.clock, self.progress, self.handle_signals = clock, progress, handle_signals
        self.backend = self.info = self.spec = None

    async def close(self) -> dict:
        facts = {}
        if self.backend is not None:
            facts = await self.backend.stop()
            self.backend = self.info = self.spec = None
        return facts

    async def _ensure_backend(self, loaded: LoadedScenario) -> None:
        spec = loaded.scenario.backend
        if self.backend is not None and spec != self.spec:
            hot = getattr(self.backend, "reconfigure", None)
            if hot is None or not await hot(spec):
                await self.close()
            else:
                self.spec = spec
        if self.backend is None:
            backend = create_backend(spec, self.clock, {"base_dir": loaded.base_dir})
            self.info = await backend.start()  # BackendError propagates: nothing loaded
            self.backend, self.spec = backend, spec

    async def run_point(self, loaded: LoadedScenario, out_dir) -> RunResult:
        scenario = loaded.scenario
        out = (
            Path(out_dir)
            if out_dir is not None
            else Path(scenario.outputs.dir)
            if scenario.outputs.dir
            else default_out_dir(scenario.name)
        )
        started_at = dt.datetime.now(dt.timezone.utc).isoformat(
            timespec="seconds"
        )  # a label, never a duration
        env_facts = lambda: environment.collect(scenario.seeds.model_dump(), loaded.sha256)  # noqa: E731
        try:
            await self._ensure_backend(loaded)
            plan = build_plan(
                scenario, self.info.tokenizer, lambda name: resolve_path(loaded, name)
            )
            details = dict(self.info.details)
            if hasattr(self.backend, "prepare"):
                details.update(await self.backend.prepare(plan))
            env = env_facts()  # at start: the processes already on the GPU are part of it
        except BackendError as exc:
            await self.close()
            metrics = _failed_start(loaded, started_at, env_facts(), str(exc))
            atomic.write_json(out / "metrics.json", metrics)
            return RunResult(out, metrics)
        sampler = _sampler(scenario)
        window = self._profile_window(scenario, out)
        try:
            outcome = await self._run(plan, scenario, window)
        finally:
            if sampler:
                await asyncio.to_thread(sampler.stop)
        facts = await self.backend.point_facts() if hasattr(self.backend, "point_facts") else {}
        if outcome.status == "failed":
            facts.update(await self.close())
        profile_export = facts.pop("profile_export", {})
        metrics = build_metrics(
            scenario=scenario,
            scenario_path=str(loaded.path),
            scenario_sha256=loaded.sha256,
            outcome=outcome,
            backend={
                "kind": scenario.backend.kind,
                "name": self.info.name if self.info else None,
                **details,
                **facts,
            },
            environment=env,
            planned=plan.planned_count,
            started_at=started_at,
        )
        _add_inside_sections(metrics, outcome, env, sampler, window, profile_export, out)
        metrics["sla"] = evaluate(metrics["scenario"]["sla"], metrics) if scenario.sla else None
        null_non_finite(metrics)
        if outcome.recorder.records is not None:
            atomic.write_jsonl(out / "requests.jsonl", outcome.recorder.records)
        atomic.write_json(out / "metrics.json", metrics)
        return RunResult(out, metrics)

    def _profile_window(self, scenario, out: Path):
        if scenario.profile is None:
            return None
        from loadtest.telemetry.profile_window import ProfileWindow

        return ProfileWindow(scenario.profile, self.backend, self.clock, out)

    async def _run(self, plan, scenario, window=None):
        runner = Runner(
            plan,
            self.backend,
            self.info.tokenizer,
            self.clock,
            scenario.load,
            scenario.outputs.interval,
            keep_records=scenario.outputs.requests_jsonl,
            profile=window,
        )
        restore = _install_sigint(runner) if self.handle_signals else None
        progress_task = asyncio.create_task(self.progress(runner)) if self.progress else None
        try:
            return await runner.run()
        finally:
            if progress_task:
                progress_task.cancel()
                await asyncio.gather(progress_task, return_exceptions=True)
            if restore:
                restore()


def _add_inside_sections(
    metrics: dict, outcome, env: dict, sampler, window, profile_export: dict, out: Path
) -> None:
    """``gpu`` (and gpu.csv), the environment's warnings, ``profile``, ``roofline``."""
    rec = outcome.recorder
    if sampler:
        span = (rec.window_start, rec.window_end) if rec.window_start and rec.window_end else None
        metrics["gpu"] = sampler.summary(outcome.t0_ns, span, rec.window_tokens)
        if sampler.rows:
            atomic.write_text(out / "gpu.csv", sampler.csv_text(outcome.t0_ns))
    else:
        metrics["gpu"] = {"available": False, "reason": "telemetry.gpu: false"}
    metrics["validity"]["warnings"] += environment.warnings(env, metrics["gpu"])
    if metrics["backend"].get("stamp_mismatches"):
        metrics["validity"]["warnings"].append(
            f"{metrics['backend']['stamp_mismatches']} batch(es) had a different number of token stamps than tokens "
            "generated: the per-step stamp hook did not match this transformers version; report it"
        )
    if window is not None:
        metrics["profile"] = {**window.summary(outcome.t0_ns, rec.profiled), **profile_export}
        metrics["requests"]["profiled"] = rec.profiled
    metrics["roofline"] = _roofline(metrics, env)


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
    result["diagnosis"] = roofline.diagnose(
        result, metrics["gpu"], (metrics.get("profile") or {}).get("kernel_summary")
    )
    return result


def _sampler(scenario):
    """A started GPU sampler, or None when the scenario turns sampling off."""
    if not scenario.telemetry.gpu:
        return None
    from loadtest.telemetry.gpu_sampler import GpuSampler

    sampler = GpuSampler(scenario.telemetry.interval / 1e9, devices=scenario.telemetry.devices)
    sampler.start()
    return sampler


def _install_sigint(runner: Runner):
    """First Ctrl-C: stop, write the partial result (status interrupted). Second: exit at once."""
    loop = asyncio.get_running_loop()
    pressed = []

    def on_sigint():
        if pressed:
            os._exit(130)
        pressed.append(True)
        runner.request_stop("interrupted")

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (NotImplementedError, RuntimeError, ValueError):
        return None
    return lambda: loop.remove_signal_handler(signal.SIGINT)


def _failed_start(loaded: LoadedScenario, started_at: str, env: dict, error: str) -> dict:
    from loadtest.results.build import SCHEMA

    return {
        "schema": SCHEMA,
        "status": "failed",
        "name": loaded.scenario.name,
        "started_at": started_at,
        "scenario_file": str(loaded.path),
        "scenario": loaded.scenario.model_dump(mode="json", by_alias=True, exclude_none=True),
        "environment": env,
        "backend": {"kind": loaded.scenario.backend.kind, "error": error},
        "validity": {
            "valid": False,
            "reasons": [f"backend failed to start: {error}"],
            "warnings": [],
        },
        "sla": None,
        "commit": env.get("commit"),
    }
