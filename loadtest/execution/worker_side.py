"""A client worker's own side: its backend, its share of the plan, its runner.

``WorkerSide`` is the same wherever the worker lives, a process on this host
(``worker_main``, spoken to through a pipe) or a Ray actor on some node
(``execution.ray_workers``): start (load the backend, build the plan from the seeds, take the
share, warm up), then run the share from the t0 it is given, on the clock it is given, and hand
back the outcome with its recorder unsettled (the coordinator settles the merged window once).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import signal
import sys
from array import array
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from loadtest.backends import create_backend
from loadtest.backends.base import Backend, BackendContext, BackendInfo
from loadtest.config.loading import LoadedScenario, resolve_path
from loadtest.core import loop, secrets
from loadtest.core.clock import Clock, MonotonicClock
from loadtest.core.errors import BackendError
from loadtest.core.heap import settle_heap
from loadtest.core.loop import read_pipe_on_loop
from loadtest.core.otlp import sample_ratio
from loadtest.execution.in_flight_cap import worker_share
from loadtest.execution.live import LiveStats, LiveWants
from loadtest.execution.prompts_ahead import PromptsAhead
from loadtest.execution.request import RequestState
from loadtest.execution.runner import Runner, RunOutcome
from loadtest.execution.traces import SpanExport, point_attributes
from loadtest.workload.plan import Plan, build_plan

HEARTBEAT_S = 0.5
STOP_GRACE_S = 10.0  # a worker asked to stop has this long to send what it measured


def plan_fingerprint(plan: Plan) -> str:
    """A digest of everything the plan decided (timing, lengths, prompts, dataset tokens):
    workers that built different plans (another data file or tokenizer on their node) differ."""
    h = hashlib.sha256()
    for field in ("index", "offset_ns", "input_tokens", "output_tokens", "prompt_seed"):
        h.update(array("q", (getattr(r, field) or 0 for r in plan.requests)).tobytes())
    h.update(array("q", (-1 if r.dataset_row is None else r.dataset_row for r in plan.requests)))
    for row in plan.dataset or ():
        h.update(array("q", row.token_ids).tobytes())
    h.update(repr((plan.window_start_ns, plan.window_end_ns, plan.planned_count)).encode())
    return h.hexdigest()[:16]


class WorkerSide:
    """One worker: ``start`` before t0, then ``run`` from the coordinator's t0."""

    def __init__(self, loaded: LoadedScenario, index: int, count: int, clock: Clock) -> None:
        self.loaded, self.index, self.count, self.clock = loaded, index, count, clock
        self.backend: Backend | None = None
        self.runner: Runner | None = None
        self._share: Plan | None = None
        self._prompts: PromptsAhead | None = None  # made before ready
        self._info: BackendInfo | None = None
        self._early_stop: tuple[str, int | None] | None = None
        self._spans: SpanExport | None = None  # this worker's request spans (outputs.otel)

    async def start(self) -> dict:
        """Load and warm the backend, build the plan and take this worker's share."""
        scenario = self.loaded.scenario
        secrets.register(*scenario.backend.secret_values())
        otel = scenario.outputs.otel
        context = BackendContext(Path(self.loaded.base_dir), otel, sample_ratio() if otel else 1.0)
        self.backend = backend = create_backend(scenario.backend, self.clock, context)
        self._info = info = await backend.start()
        plan = build_plan(scenario, info.tokenizer, lambda name: resolve_path(self.loaded, name))
        self._share = plan.share(self.index, self.count)
        details = {
            **info.details,
            **await backend.prepare(self._share),
            "traffic": plan.describe(),  # the whole plan's, the same from every worker
        }
        if backend.needs_prompt_ids:  # before "ready" too: made while no clock runs
            self._prompts = PromptsAhead(self._share, info.tokenizer)
        settle_heap()  # before "ready": t0 is near once every worker is
        return {
            "name": info.name,
            "details": details,
            "notices": info.notices,
            "planned": plan.planned_count,
            "fingerprint": plan_fingerprint(plan),
        }

    async def run(self, t0_ns: int) -> tuple[RunOutcome, dict]:
        """This worker's share from ``t0_ns`` (on ``clock``); the outcome and backend facts."""
        scenario = self.loaded.scenario
        assert self.backend is not None and self._share is not None and self._info is not None
        load = scenario.load
        if load.max_rate is not None:  # the ceiling is the run's: each worker holds its share
            load = load.model_copy(update={"max_rate": load.max_rate / self.count})
        if load.max_in_flight is not None:  # the cap too: shares that add up to it
            share = worker_share(load.max_in_flight, self.index, self.count)
            load = load.model_copy(update={"max_in_flight": share})
        goodput = scenario.goodput
        self.runner = Runner(
            self._share,
            self.backend,
            self._info.tokenizer,
            self.clock,
            load,
            scenario.outputs.interval,
            keep_records=scenario.outputs.requests_jsonl,
            goodput=None if goodput is None else (goodput.ttft, goodput.tpot, goodput.e2e),
            prompts=self._prompts,
            trace=self._traces(),
        )
        if self._early_stop is not None:  # a stop that came before the runner existed
            self.runner.request_stop(*self._early_stop)
        outcome = await self.runner.run(t0_ns=t0_ns, settle=False)
        try:
            facts = await self.backend.point_facts()
        except BackendError as exc:
            facts = {"error": str(exc)}
        return outcome, facts

    def request_stop(self, reason: str, at_ns: int | None) -> None:
        if self.runner is not None:
            self.runner.request_stop(reason, at_ns)
        elif self._early_stop is None:
            self._early_stop = (reason, at_ns)

    def stats(self, wants: LiveWants) -> LiveStats | None:
        """Live counts, and for a display the live TTFT, ITL and E2E histograms, encoded (the
        coordinator pools them over the workers); for a metrics endpoint the measured requests
        so far. None before the run."""
        runner = self.runner
        if runner is None:
            return None
        out = runner.stats(percentiles=False, totals=wants.totals)
        if wants.percentiles and runner.recorder is not None:
            hists = runner.recorder.live_histograms()
            out = replace(out, histograms={m: h.encode() for m, h in hists.items() if h.count})
        return out

    def _traces(self) -> Callable[[RequestState], None] | None:
        """This worker's own span exporter, where the run is traced (``outputs.otel``)."""
        scenario = self.loaded.scenario
        if not scenario.outputs.otel:
            return None
        if self._spans is None:
            self._spans = SpanExport(self.clock.now_ns)
        return self._spans.point(point_attributes(scenario, worker=self.index))

    async def close(self) -> None:
        if self._spans is not None:  # the coordinator says where they went; this, if not all
            spans, self._spans = self._spans, None
            line = await asyncio.to_thread(spans.close)
            if spans.failed:
                sys.stderr.write(f"loadtest: worker {self.index}: {secrets.scrub(line)}\n")
        if self.backend is not None:
            backend, self.backend = self.backend, None
            await backend.stop()


# -- a worker process on this host, spoken to through a pipe ---------------------------------


def worker_main(conn, loaded: LoadedScenario, index: int, count: int) -> None:
    """A worker process: its backend, its share of the plan, on the parent's t0."""
    # Ctrl-C reaches the whole process group: only the parent decides, and tells the workers
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:
        loop.run(_work(conn, loaded, index, count))
    except BaseException as exc:  # whatever it is, the parent must hear of it
        send(conn, ("error", secrets.scrub(f"{type(exc).__name__}: {exc}")))
    finally:
        conn.close()


def send(conn, msg: tuple) -> None:
    with contextlib.suppress(OSError, ValueError):  # the other end is gone: its loss is reported
        conn.send(msg)


class _Inbox:
    """The parent's messages, read by the event loop; a stop goes straight to the worker."""

    def __init__(self, conn, side: WorkerSide) -> None:
        self.conn, self.side = conn, side
        self.queue: asyncio.Queue[tuple] = asyncio.Queue()
        read_pipe_on_loop(conn.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            while self.conn.poll():
                self._take(self.conn.recv())
        except (EOFError, OSError):  # the parent is gone: stop, nobody is left to tell
            asyncio.get_running_loop().remove_reader(self.conn.fileno())
            self._take(("stop", "interrupted", None))

    def _take(self, msg: tuple) -> None:
        if msg[0] == "stop":
            self.side.request_stop(msg[1], msg[2])
        self.queue.put_nowait(msg)


async def _work(conn, loaded: LoadedScenario, index: int, count: int) -> None:
    side = WorkerSide(loaded, index, count, MonotonicClock())
    inbox = _Inbox(conn, side)
    try:
        conn.send(("ready", await side.start()))
        # the parent answers within its start timeout, or is gone (EOF: a stop)
        limit = loaded.scenario.backend.start_timeout / 1e9 + STOP_GRACE_S
        msg = await asyncio.wait_for(inbox.queue.get(), limit)
        if msg[0] != "go":
            return
        beat = asyncio.create_task(_heartbeat(conn, side, msg[2]))
        try:
            outcome, facts = await side.run(msg[1])
        finally:
            beat.cancel()
        conn.send(("done", outcome, facts))
    finally:
        await side.close()


async def _heartbeat(conn, side: WorkerSide, wants: LiveWants) -> None:
    """Live counts for the parent's display; also how it knows this worker is alive."""
    while True:
        await asyncio.sleep(HEARTBEAT_S)
        send(conn, ("stats", side.stats(wants)))
