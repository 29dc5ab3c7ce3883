"""More load than one process can make: worker processes on this host, one plan, one t0.

The parent starts ``load.workers`` processes. Each loads its own backend (its own connections),
builds the same plan from the seeds, takes its share (``Plan.share``) and says it is ready. The
parent then picks t0 on the host's monotonic clock, which every process reads alike, and each
worker dispatches its share against it, records into its own histograms, and sends its outcome
back; the parent merges them losslessly (``recorder.merge``) into one outcome, with each
worker's own counts and lags beside it.

Every wait is bounded. A worker sends a heartbeat (its live counts) twice a second; one that
dies, fails, or falls silent for ``SILENT_AFTER_S`` ends the run as failed, the others are
stopped, and what they measured is kept. A worker whose parent is gone stops by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadtest.backends import combine_facts, create_backend
from loadtest.config.loading import LoadedScenario, resolve_path
from loadtest.core import secrets
from loadtest.core.clock import Clock, MonotonicClock
from loadtest.core.errors import BackendError
from loadtest.core.heap import settle_heap
from loadtest.core.histogram import LatencyHistogram
from loadtest.execution import recorder
from loadtest.execution.runner import Runner, RunOutcome, SessionCounts
from loadtest.workload.plan import build_plan

HEARTBEAT_S = 0.5
SILENT_AFTER_S = 15.0  # no message from a running worker for this long: it is stuck
T0_LEAD_NS = 100_000_000  # t0 this far after "go" is sent: every worker is waiting by then
STOP_GRACE_S = 10.0  # a worker asked to stop has this long to send what it measured
EXIT_GRACE_S = 5.0  # and this long to exit after, before it is killed


@dataclass
class WorkerReady:
    """What the workers loaded (worker 0's view; every worker loads the same spec)."""

    name: str
    details: dict
    notices: list[str]
    planned: int | None


@dataclass
class WorkerPart:
    """One worker's share of a run, as the result lists it."""

    index: int
    pid: int | None
    status: str  # ok | interrupted | failed | lost (died or fell silent: its measurements too)
    sent: int = 0
    completed: int = 0
    failed: int = 0
    dispatch_lag: LatencyHistogram = field(default_factory=LatencyHistogram)
    loop_lag: LatencyHistogram = field(default_factory=LatencyHistogram)
    failure: str | None = None


class WorkerGroup:
    """The parent's side: start the workers, run them from one t0, merge what they measured.

    Quacks like a ``Runner`` where the session and the progress display need it (``stats``,
    ``request_stop``)."""

    def __init__(self, loaded: LoadedScenario, clock: Clock) -> None:
        self.loaded, self.clock = loaded, clock
        self.count = loaded.scenario.load.workers
        self.gpu_probe: Callable[[], list[float] | None] | None = None
        # heartbeats carry live percentiles only for a display: each costs the worker's loop
        self.live_percentiles = False
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._inbox: asyncio.Queue[tuple[int, tuple]] = asyncio.Queue()
        self._last_heard: list[float] = []
        self._stats: list[dict] = []
        self._stop: tuple[str, int] | None = None
        self._planned: int | None = None
        self._details: dict = {}
        self.t0: int | None = None

    # -- start --------------------------------------------------------------------------------

    async def start(self, timeout_s: float) -> WorkerReady:
        """Spawn the workers and wait, at most ``timeout_s``, until every one is ready."""
        ctx = multiprocessing.get_context("spawn")  # never fork a process holding threads
        loop = asyncio.get_running_loop()
        for i in range(self.count):
            parent_end, child_end = ctx.Pipe()
            proc = ctx.Process(
                target=worker_main,
                args=(child_end, self.loaded, i, self.count),
                name=f"loadtest-worker-{i}",
                daemon=True,
            )
            proc.start()
            child_end.close()
            self._procs.append(proc)
            self._conns.append(parent_end)
            self._last_heard.append(loop.time())
            self._stats.append({})
            loop.add_reader(parent_end.fileno(), self._readable, i)
        ready: dict[int, dict] = {}
        deadline = loop.time() + timeout_s
        while len(ready) < self.count:
            i, msg = await self._next(deadline, "to start")
            if msg[0] == "ready":
                ready[i] = msg[1]
            elif msg[0] in ("error", "exited"):
                raise BackendError(f"worker {i} of {self.count}: {msg[1]}")
        first = ready[0]
        self._planned, self._details = first["planned"], first["details"]
        return WorkerReady(first["name"], first["details"], first["notices"], first["planned"])

    # -- run ----------------------------------------------------------------------------------

    async def run(self) -> tuple[RunOutcome, dict]:
        """Run every worker from one t0; the merged outcome and the backends' combined facts."""
        loop = asyncio.get_running_loop()
        self.t0 = self.clock.now_ns() + T0_LEAD_NS
        for conn in self._conns:
            _send(conn, ("go", self.t0, self.live_percentiles))
        parts: dict[int, tuple[RunOutcome, dict]] = {}
        lost: dict[int, str] = {}
        failure: str | None = None
        stop_deadline: float | None = None
        while len(parts) + len(lost) < self.count:
            now = loop.time()
            silent = [
                i
                for i in range(self.count)
                if i not in parts and i not in lost and now - self._last_heard[i] > SILENT_AFTER_S
            ]
            for i in silent:
                lost[i] = f"no word for {SILENT_AFTER_S:g} s (stuck; killed)"
                self._procs[i].kill()
            if stop_deadline is not None and now > stop_deadline:
                for i in range(self.count):
                    if i not in parts and i not in lost:
                        lost[i] = f"did not stop within {STOP_GRACE_S:g} s (killed)"
                        self._procs[i].kill()
                break
            if len(parts) + len(lost) == self.count:
                break
            if lost and failure is None:
                i = min(lost)
                failure = (
                    f"worker {i} of {self.count} was lost: {lost[i]}; what it measured is lost"
                )
                self.request_stop("failed")
            if self._stop is not None and stop_deadline is None:
                stop_deadline = now + STOP_GRACE_S
            try:
                i, msg = await self._next(now + HEARTBEAT_S, None)
            except TimeoutError:
                continue
            kind = msg[0]
            if kind == "done":
                parts[i] = (msg[1], msg[2])
                if msg[1].status == "failed" and failure is None:
                    failure = f"worker {i} of {self.count}: {msg[1].failure}"
                    self.request_stop("failed")
            elif kind in ("error", "exited") and i not in parts:
                lost[i] = msg[1]
        if lost and failure is None:
            i = min(lost)
            failure = f"worker {i} of {self.count} was lost: {lost[i]}; what it measured is lost"
        facts = [parts[i][1] for i in sorted(parts)]
        return self._merge(parts, lost, failure), combine_facts(
            self.loaded.scenario.backend, self._details, facts
        )

    def _merge(
        self, parts: dict[int, tuple[RunOutcome, dict]], lost: dict[int, str], failure: str | None
    ) -> RunOutcome:
        assert self.t0 is not None
        outcomes = [parts[i][0] for i in sorted(parts)]
        if outcomes:
            rec = recorder.merge([o.recorder for o in outcomes])
        else:
            rec = recorder.Recorder(self.t0, self.loaded.scenario.outputs.interval, None, None)
        stops = [o.stopped_ns for o in outcomes if o.stopped_ns is not None]
        if self._stop is not None:
            stops.append(self._stop[1])
        stopped = min(stops) if stops else None
        rec.settle_window(stopped)
        loop_lag = LatencyHistogram()
        for o in outcomes:
            loop_lag.add(o.loop_lag)
        statuses = {o.status for o in outcomes}
        status = (
            "failed"
            if failure or lost or "failed" in statuses
            else "interrupted"
            if "interrupted" in statuses or (self._stop and self._stop[0] == "interrupted")
            else "ok"
        )
        workers = []
        for i in range(self.count):
            pid = self._procs[i].pid
            if i in parts:
                o = parts[i][0]
                workers.append(
                    WorkerPart(
                        i,
                        pid,
                        o.status,
                        o.sent,
                        o.recorder.completed,
                        o.recorder.failed,
                        o.recorder.whole["dispatch_lag"],
                        o.loop_lag,
                        o.failure,
                    )
                )
            else:
                workers.append(WorkerPart(i, pid, "lost", failure=lost.get(i)))
        return RunOutcome(
            rec,
            self.t0,
            max([o.end_ns for o in outcomes], default=self.clock.now_ns()),
            status,
            loop_lag,
            sum(o.sent for o in outcomes),
            sum(o.cancelled for o in outcomes),
            failure,
            sum(o.throttled for o in outcomes),
            sessions=_sum_sessions([o.sessions for o in outcomes]),
            stopped_ns=stopped,
            workers=workers,
        )

    # -- the runner's face --------------------------------------------------------------------

    def request_stop(self, reason: str = "interrupted") -> None:
        """Stop every worker now; the stop's time is the parent's, so every part ends alike."""
        if self._stop is not None:
            return
        self._stop = (reason, self.clock.now_ns())
        for conn in self._conns:
            _send(conn, ("stop", *self._stop))

    def stats(self) -> dict:
        """The workers' latest counts, summed; percentiles are the worst worker's."""
        out: dict[str, Any] = {
            "elapsed_s": 0.0 if self.t0 is None else max(0, self.clock.now_ns() - self.t0) / 1e9,
            "window_end_s": None,
            "gpu_util_pct": None if self.gpu_probe is None else self.gpu_probe(),
            "planned": self._planned,
        }
        stats = [s for s in self._stats if s]
        for key in ("sent", "in_flight", "completed", "failed"):
            out[key] = sum(s.get(key) or 0 for s in stats)
        for key in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"):
            values = [s[key] for s in stats if s.get(key) is not None]
            out[key] = max(values) if values else None
        if stats:
            out["window_end_s"] = stats[0].get("window_end_s")
        return out

    # -- messages -----------------------------------------------------------------------------

    def _readable(self, i: int) -> None:
        conn, loop = self._conns[i], asyncio.get_running_loop()
        try:
            while conn.poll():
                msg = conn.recv()
                self._last_heard[i] = loop.time()
                if msg[0] == "stats":
                    self._stats[i] = msg[1]
                else:
                    self._inbox.put_nowait((i, msg))
        except (EOFError, OSError):
            loop.remove_reader(conn.fileno())
            self._procs[i].join(1.0)
            code = self._procs[i].exitcode
            self._inbox.put_nowait((i, ("exited", f"exited (code {code}) without a result")))

    async def _next(self, deadline: float, what: str | None) -> tuple[int, tuple]:
        """The next message from any worker; TimeoutError at ``deadline`` (loop time)."""
        timeout = max(0.0, deadline - asyncio.get_running_loop().time())
        try:
            return await asyncio.wait_for(self._inbox.get(), timeout)
        except TimeoutError:
            if what is None:
                raise
            raise BackendError(f"the workers did not get ready {what} in time") from None

    async def close(self) -> None:
        """Stop the workers (asked, then killed) and release the pipes; bounded."""
        loop = asyncio.get_running_loop()
        for conn in self._conns:
            _send(conn, ("stop", "closed", None))
        deadline = loop.time() + EXIT_GRACE_S
        for proc in self._procs:
            await asyncio.to_thread(proc.join, max(0.0, deadline - loop.time()))
            if proc.is_alive():
                proc.kill()
                await asyncio.to_thread(proc.join, 1.0)
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):
                loop.remove_reader(conn.fileno())
            conn.close()
        self._procs, self._conns = [], []


def _send(conn, msg: tuple) -> None:
    with contextlib.suppress(OSError, ValueError):  # a worker already gone: its loss is reported
        conn.send(msg)


def _sum_sessions(parts: list[SessionCounts | None]) -> SessionCounts | None:
    present = [p for p in parts if p is not None]
    if not present:
        return None
    total = SessionCounts()
    for p in present:
        for name in vars(total):
            setattr(total, name, getattr(total, name) + getattr(p, name))
    return total


# -- the worker's side ----------------------------------------------------------------------------


def worker_main(conn, loaded: LoadedScenario, index: int, count: int) -> None:
    """A worker process: its backend, its share of the plan, on the parent's t0."""
    # Ctrl-C reaches the whole process group: only the parent decides, and tells the workers
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:
        asyncio.run(_work(conn, loaded, index, count))
    except BaseException as exc:  # whatever it is, the parent must hear of it
        _send(conn, ("error", secrets.scrub(f"{type(exc).__name__}: {exc}")))
    finally:
        conn.close()


class _Inbox:
    """The parent's messages, read by the event loop; a stop goes straight to the runner."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.queue: asyncio.Queue[tuple] = asyncio.Queue()
        self.runner: Runner | None = None
        asyncio.get_running_loop().add_reader(conn.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            while self.conn.poll():
                self._take(self.conn.recv())
        except (EOFError, OSError):  # the parent is gone: stop, nobody is left to tell
            asyncio.get_running_loop().remove_reader(self.conn.fileno())
            self._take(("stop", "interrupted", None))

    def _take(self, msg: tuple) -> None:
        if msg[0] == "stop" and self.runner is not None:
            self.runner.request_stop(msg[1], msg[2])
        self.queue.put_nowait(msg)


async def _work(conn, loaded: LoadedScenario, index: int, count: int) -> None:
    scenario = loaded.scenario
    secrets.register(*scenario.backend.secret_values())
    clock = MonotonicClock()
    inbox = _Inbox(conn)
    backend = create_backend(scenario.backend, clock, {"base_dir": loaded.base_dir})
    try:
        info = await backend.start()
        plan = build_plan(scenario, info.tokenizer, lambda name: resolve_path(loaded, name))
        share = plan.share(index, count)
        details = {**info.details, **await backend.prepare(share)}
        settle_heap()  # before "ready": t0 is near once every worker is
        ready = {
            "name": info.name,
            "details": details,
            "notices": info.notices,
            "planned": plan.planned_count,
        }
        conn.send(("ready", ready))
        # the parent answers within its start timeout, or is gone (EOF: a stop)
        limit = scenario.backend.start_timeout / 1e9 + STOP_GRACE_S
        msg = await asyncio.wait_for(inbox.queue.get(), limit)
        if msg[0] != "go":
            return
        load = scenario.load
        if load.max_rate is not None:  # the ceiling is the run's: each worker holds its share
            load = load.model_copy(update={"max_rate": load.max_rate / count})
        goodput = scenario.goodput
        runner = inbox.runner = Runner(
            share,
            backend,
            info.tokenizer,
            clock,
            load,
            scenario.outputs.interval,
            keep_records=scenario.outputs.requests_jsonl,
            goodput=None if goodput is None else (goodput.ttft, goodput.tpot, goodput.e2e),
        )
        while not inbox.queue.empty():  # a stop that came before the runner existed
            early = inbox.queue.get_nowait()
            if early[0] == "stop":
                runner.request_stop(early[1], early[2])
        beat = asyncio.create_task(_heartbeat(conn, runner, msg[2]))
        try:
            outcome = await runner.run(t0_ns=msg[1], settle=False)
        finally:
            beat.cancel()
        try:
            facts = await backend.point_facts()
        except BackendError as exc:
            facts = {"error": str(exc)}
        conn.send(("done", outcome, facts))
    finally:
        await backend.stop()


async def _heartbeat(conn, runner: Runner, percentiles: bool) -> None:
    """Live counts for the parent's display; also how it knows this worker is alive."""
    while True:
        await asyncio.sleep(HEARTBEAT_S)
        _send(conn, ("stats", runner.stats(percentiles)))
