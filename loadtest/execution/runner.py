"""Dispatch at absolute intended times; warmup, measure, drain; watch the watcher.

Open loop: one dispatcher walks the plan, sleeping until ``t0 + offset`` (never a relative
sleep, so lateness never accumulates) and hands each request to its own task. Closed loop: one
task per user, each sending ``think`` after its previous response. Latency always counts from the
intended time; ``sent - intended`` is the dispatch lag, and an event-loop probe measures how long
a ready callback waits. When either is too high the run is marked invalid, with the reason.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from loadtest.backends.base import Backend
from loadtest.config.scenario import Load
from loadtest.core.clock import Clock, VirtualClock, busy_share_since, busy_start
from loadtest.core.heap import collector_paused, settle_heap
from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.answer_check import AnswerCheck
from loadtest.execution.backlog import RecordingBacklog
from loadtest.execution.driver import RequestDriver
from loadtest.execution.in_flight_cap import InFlightCap
from loadtest.execution.live import LivePercentiles, LiveStats, OpenLoopDue
from loadtest.execution.loop_watch import LoopWatch
from loadtest.execution.prompts_ahead import PromptsAhead
from loadtest.execution.rate_ceiling import RateCeiling
from loadtest.execution.recorder import Recorder
from loadtest.execution.request import RequestState
from loadtest.execution.sends import Sends
from loadtest.execution.users import SessionCounts, Users
from loadtest.execution.worker_part import WorkerPart
from loadtest.telemetry.profile_window import ProfileWindow
from loadtest.workload.plan import Plan
from loadtest.workload.tokenizer import Tokenizer

T = TypeVar("T")

START_DELAY_NS = 1_000_000  # t0 is this far ahead of run(): the first send is on time


@dataclass
class RunOutcome:
    """What a run produced before judging: the recorder, the span, the counts and why it stopped."""

    recorder: Recorder
    t0_ns: int
    end_ns: int
    status: str  # ok | interrupted | failed (validity is judged later, from the numbers)
    loop_lag: LatencyHistogram
    sent: int
    interrupted: int  # in flight when the run was stopped (interrupted, failed)
    failure: str | None = None
    throttled: int = 0
    notes: list[str] = field(default_factory=list)
    sessions: SessionCounts | None = None
    stopped_ns: int | None = None  # when a stop was asked for (a signal, a failure)
    workers: list[WorkerPart] | None = None  # worker processes' parts
    # the event loop thread's CPU time over the run's real time (None on a virtual clock):
    # near 1 the loop is one core's limit, and every stamp and send waits on it
    loop_busy: float | None = None
    prompts_at_send: int = 0  # prompts made as they were sent, past what was made before t0
    internal_error: str | None = None  # a bug in loadtest stopped the run (it exits 5)


class Runner:
    """Sends the plan on its clock, drives every request, drains, and watches for silence."""

    def __init__(
        self,
        plan: Plan,
        backend: Backend,
        tokenizer: Tokenizer,
        clock: Clock,
        load: Load,
        interval_ns: int,
        keep_records: bool = False,
        profile: ProfileWindow | None = None,
        goodput: tuple[int | None, int | None, int | None] | None = None,
        prompts: PromptsAhead | None = None,
        trace: Callable[[RequestState], None] | None = None,
        answers: AnswerCheck | None = None,
    ) -> None:
        """``goodput``: per-request objectives in ns (ttft, tpot, e2e), or None; ``prompts``:
        the plan's prompts, made before t0 (else ``run`` makes them); ``trace``: called with
        each finished request (its span, ``traces.SpanExport``); ``answers``: the references
        each answer under load is compared with (``answer_check``)."""
        self.answers = answers
        self.trace = trace
        self.goodput = goodput
        self.profile = profile
        self.plan, self.backend, self.tokenizer = plan, backend, tokenizer
        self.clock, self.load = clock, load
        self.interval_ns = interval_ns
        self.keep_records = keep_records
        self.recorder: Recorder | None = None
        # the progress display's view of the GPUs: each device's latest kernel-active %
        self.gpu_probe: Callable[[], list[float] | None] | None = None
        self._watch = LoopWatch(
            clock.now_ns, real=not isinstance(clock, VirtualClock)
        )  # the loop's lag, and its thread's CPU waits
        self.t0: int | None = None
        self.requests = RequestDriver(
            plan,
            backend,
            tokenizer,
            clock,
            load,
            self._watch,
            profile=profile,
            fail_run=self._fail_run,
            cancel_reason=lambda: self._cancel_reason,
        )
        self.requests.prompts = prompts
        self.requests.answers = answers
        ceiling = None if load.max_rate is None else RateCeiling(load.max_rate, clock)
        cap = None if load.max_in_flight is None else InFlightCap(load.max_in_flight, clock)
        self.sends = Sends(self.requests, ceiling, cap)
        self.users = Users(plan, clock, backend, tokenizer, self.sends)
        self._loop_lag = LatencyHistogram()  # the run's, once it runs
        self._due = OpenLoopDue(plan)  # an open loop's requests due (the live backlog)
        self._cancel_reason: str | None = None
        self._failure: str | None = None
        self._stop = asyncio.Event()
        self.stopped_ns: int | None = None  # when a stop was asked for: the measured span ends

    # -- public -------------------------------------------------------------------------------

    def request_stop(self, reason: str = "interrupted", at_ns: int | None = None) -> None:
        """Stop dispatching and end in-flight requests now (Ctrl-C, or a crashed backend);
        ``at_ns``: when the stop was decided, where that was elsewhere (a worker's parent)."""
        if self._cancel_reason is None:
            self._cancel_reason = reason
            self.stopped_ns = self.clock.now_ns() if at_ns is None else at_ns
        self._stop.set()

    def _fail_run(self, why: str | None) -> None:
        """Stop the run as failed, saying ``why`` (None: it was said already)."""
        if why is not None:
            self._failure = why
        self.request_stop("failed")

    async def run(self, t0_ns: int | None = None, settle: bool = True) -> RunOutcome:
        """The run: t0 a moment from now (or ``t0_ns``, agreed with other workers), dispatch
        until the window ends, drain, then the outcome. Without ``settle`` a window that ends
        with its last request is left open: the workers' parent settles it over all of them."""
        if self.requests.prompts is None and self.backend.needs_prompt_ids:
            self.requests.prompts = PromptsAhead(self.plan, self.tokenizer)
        settle_heap()  # the plan and everything loaded: never scanned by a collection in the window
        # Collections run where the dispatcher has slack (after recording), not wherever an
        # allocation happens to trip the threshold: a collection inside a send is dispatch lag.
        with collector_paused():
            return await self._run(t0_ns, settle)

    async def _run(self, t0_ns: int | None, settle: bool) -> RunOutcome:
        t0 = self.t0 = self.clock.now_ns() + START_DELAY_NS if t0_ns is None else t0_ns
        self.backend.set_origin(t0)
        rec = self.recorder = self._recorder(t0)
        requests, sends = self.requests, self.sends
        sends.start(self.t0, rec)
        backlog = requests.backlog = RecordingBacklog(
            rec, self.clock.now_ns, lambda: sends.next_due_ns, lambda: requests.unstarted > 0
        )
        if self.profile is not None:
            self.profile.arm(self.t0)
        loop_lag = self._loop_lag = LatencyHistogram()
        busy_from = busy_start(self.clock)
        probe = asyncio.create_task(self._watch.probe(loop_lag))
        watchdog = asyncio.create_task(self._watch_for_silence())
        window_opens = None
        if self.plan.window_start_ns is not None:  # 0 is a window opening at t0 (a burst)
            window_opens = asyncio.create_task(
                self._tell_window_start(self.t0 + self.plan.window_start_ns)
            )
        closed = self.plan.closed_loop is not None
        dispatch = asyncio.create_task(
            self.users.dispatch_closed()
            if closed
            else sends.open_loop(self.plan, self.clock, self.users)
        )
        window_end = None if self.plan.window_end_ns is None else self.t0 + self.plan.window_end_ns
        # Closed loop: users hold their in-flight request, so the dispatcher only ends when they
        # do; a time window's end is then also the end of sending.
        await self._wait(dispatch, window_end if closed else None, until_idle=False)
        if not self._stop.is_set():
            deadline = max(self.clock.now_ns(), window_end or 0) + self.load.drain_timeout
            await self._wait(dispatch, deadline, until_idle=True)
        dispatch.cancel()
        await self._cancel_all(self._cancel_reason or "drain")
        helpers = [probe, watchdog, *([window_opens] if window_opens else [])]
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, dispatch, return_exceptions=True)
        if self.profile is not None:  # an interrupted run waits for no profiler
            await self.profile.finish(wait=self._cancel_reason != "interrupted")
        backlog.record_all()  # nothing more to dispatch
        rec.trace = None  # its spans are handed over; the outcome travels (a worker's, pickled)
        if settle:
            rec.close(self.stopped_ns)
        else:
            rec.close_intervals()
        gc.unfreeze()  # a sweep's next point settles its own heap
        return self._outcome(rec, t0, loop_lag, busy_share_since(busy_from))

    def _recorder(self, t0: int) -> Recorder:
        """The run's recorder, from ``t0``, with what it hands each request to."""
        plan = self.plan
        rec = Recorder(t0, self.interval_ns, plan.window_start_ns, plan.window_end_ns)
        # one of several workers, with a window opened by its first measured request: the
        # others may open it earlier, so the requests that straddle this one's opening are kept
        rec.window.keep_before_start = plan.window_start_ns is None and plan.stride[1] > 1
        rec.goodput = self.goodput
        if self.keep_records:
            rec.records = []
        rec.trace = self.trace
        rec.answers = self.answers
        rec.profile = self.profile
        return rec

    def _outcome(
        self, rec: Recorder, t0: int, loop_lag: LatencyHistogram, busy: float | None
    ) -> RunOutcome:
        status = {"interrupted": "interrupted", "failed": "failed"}.get(
            self._cancel_reason or "", "ok"
        )
        requests = self.requests
        return RunOutcome(
            rec,
            t0,
            self.clock.now_ns(),
            status,
            loop_lag,
            requests.sent,
            requests.interrupted,
            self._failure,
            self.sends.held,
            sessions=self.users.sessions,
            stopped_ns=self.stopped_ns,
            loop_busy=busy,
            prompts_at_send=0 if requests.prompts is None else requests.prompts.left,
            internal_error=requests.internal_error,
        )

    def stats(self, percentiles: bool = True, totals: bool = False) -> LiveStats:
        """Live counts for the progress display: cheap enough to poll a few times a second.
        The live percentiles merge histograms (about 0.6 ms of event loop on wide ones): a
        worker's heartbeat leaves them out unless a display shows them. ``totals``: the
        measured requests so far, for a metrics endpoint (a merge too, once a scrape)."""
        rec = self.recorder
        end = self.plan.window_end_ns
        return LiveStats(
            elapsed_s=0.0 if self.t0 is None else max(0, self.clock.now_ns() - self.t0) / 1e9,
            window_end_s=None if end is None else end / 1e9,
            planned=self.plan.planned_count,
            sent=self.requests.sent,
            in_flight=self.requests.in_flight,
            completed=0 if rec is None else rec.completed + rec.warmup,
            failed=0 if rec is None else rec.failed,
            latency=LivePercentiles.of(rec.live_histograms())
            if rec is not None and percentiles
            else LivePercentiles(),
            gpu_util_pct=None if self.gpu_probe is None else self.gpu_probe(),
            totals=rec.totals(self._loop_lag, self._due.by(self.clock.now_ns() - (self.t0 or 0)))
            if rec is not None and totals
            else None,
        )

    # -- dispatch -------------------------------------------------------------------------------

    async def _tell_window_start(self, at_ns: int) -> None:
        await self.clock.sleep_until(at_ns)
        self.backend.window_started()

    # -- drain and stop -------------------------------------------------------------------------

    async def _wait(
        self, dispatch: asyncio.Task, deadline_ns: int | None, until_idle: bool
    ) -> None:
        """Until stop, the deadline, or: dispatch done (and, with ``until_idle``, nothing in flight)."""
        stopper = asyncio.ensure_future(self._stop.wait())
        sleeper = (
            None
            if deadline_ns is None
            else asyncio.ensure_future(self.clock.sleep_until(deadline_ns))
        )
        try:
            while not self._stop.is_set() and not (sleeper and sleeper.done()):
                if dispatch.done() and (not until_idle or not self.sends.tasks):
                    return
                waiting = {stopper} | ({sleeper} if sleeper else set())
                waiting |= set(self.sends.tasks) if dispatch.done() else {dispatch}
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if sleeper:
                sleeper.cancel()

    async def _cancel_all(self, reason: str) -> None:
        if self._cancel_reason is None:
            self._cancel_reason = reason
        await self.sends.cancel_all()

    async def _watch_for_silence(self) -> None:
        """End the run when the system under test stops answering: requests in flight and no
        event from it for ``load.stall_timeout``. Every other wait on the backend is bounded by
        this one, whatever the backend."""
        limit = self.load.stall_timeout
        while True:
            deadline = self.requests.progress_ns + limit
            in_flight = self.requests.in_flight
            if in_flight and self.clock.now_ns() >= deadline:
                self._fail_run(
                    f"the system under test stopped answering: no response event for "
                    f"{limit / 1e9:g} s with {in_flight} requests in flight (load.stall_timeout)"
                )
                return
            await self.clock.sleep_until(max(deadline, self.clock.now_ns() + limit // 4))
