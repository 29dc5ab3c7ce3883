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
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from loadtest.config.scenario import Load
from loadtest.core.clock import Clock, busy_share_since, busy_start
from loadtest.core.errors import BackendError
from loadtest.core.events import Admitted, Cancelled, Failed, Finished, Sent, Tokens
from loadtest.core.heap import collector_paused, settle_heap
from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.backlog import RecordingBacklog
from loadtest.execution.live import LivePercentiles, LiveStats
from loadtest.execution.loop_watch import LoopWatch
from loadtest.execution.prompts_ahead import PromptsAhead
from loadtest.execution.rate_ceiling import RateCeiling
from loadtest.execution.recorder import Recorder
from loadtest.execution.request import LATE_FLOOR_NS, RequestState
from loadtest.execution.users import SessionCounts, Users
from loadtest.workload.plan import Plan, PlannedRequest

T = TypeVar("T")

START_DELAY_NS = 1_000_000  # t0 is this far ahead of run(): the first send is on time
# a backend that stops a cancelled request itself has this long before the runner cancels it
CANCEL_GRACE_S = 1.0


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
    workers: list[Any] | None = None  # worker processes' parts (``workers.WorkerPart``)
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
        backend,
        tokenizer,
        clock: Clock,
        load: Load,
        interval_ns: int,
        keep_records: bool = False,
        profile=None,
        goodput: tuple[int | None, int | None, int | None] | None = None,
        prompts: PromptsAhead | None = None,
    ) -> None:
        """``goodput``: per-request objectives in ns (ttft, tpot, e2e), or None; ``prompts``:
        the plan's prompts, made before t0 (else ``run`` makes them)."""
        self.goodput = goodput
        self._prompts = prompts
        self.profile = profile  # a ProfileWindow, or None
        self.plan, self.backend, self.tokenizer, self.clock, self.load = (
            plan,
            backend,
            tokenizer,
            clock,
            load,
        )
        self.interval_ns = interval_ns
        self.keep_records = keep_records
        self.recorder: Recorder | None = None
        # the progress display's view of the GPUs: each device's latest kernel-active %
        self.gpu_probe: Callable[[], list[float] | None] | None = None
        self._watch = LoopWatch(clock.now_ns)  # the loop's lag, and its thread's CPU waits
        self.t0: int | None = None
        self.sent = self.in_flight = self.interrupted = self.throttled = 0
        self._tasks: set[asyncio.Task] = set()
        self._backlog: RecordingBacklog | None = None  # finished requests, recorded off-path
        self.users = Users(plan, clock, backend, tokenizer, self)
        self._next_due_ns: int | None = None  # the open-loop dispatcher's next deadline
        self._unstarted = 0  # spawned requests whose first step has not run
        self._cancel_reason: str | None = None
        self._failure: str | None = None
        self.internal_error: str | None = None  # a bug in loadtest stopped the run
        self._stop = asyncio.Event()
        self._throttle_exit = 0
        # A ceiling on top of the schedule, not the schedule.
        self._ceiling = None if load.max_rate is None else RateCeiling(load.max_rate, clock)
        self._progress_ns = 0  # the last event from the backend (or the first send after idle)
        self.stopped_ns: int | None = None  # when a stop was asked for: the measured span ends

    # -- public -------------------------------------------------------------------------------

    def request_stop(self, reason: str = "interrupted", at_ns: int | None = None) -> None:
        """Stop dispatching and end in-flight requests now (Ctrl-C, or a crashed backend);
        ``at_ns``: when the stop was decided, where that was elsewhere (a worker's parent)."""
        if self._cancel_reason is None:
            self._cancel_reason = reason
            self.stopped_ns = self.clock.now_ns() if at_ns is None else at_ns
        self._stop.set()

    async def run(self, t0_ns: int | None = None, settle: bool = True) -> RunOutcome:
        """The run: t0 a moment from now (or ``t0_ns``, agreed with other workers), dispatch
        until the window ends, drain, then the outcome. Without ``settle`` a window that ends
        with its last request is left open: the workers' parent settles it over all of them."""
        if self._prompts is None and self.backend.needs_prompt_ids:
            self._prompts = PromptsAhead(self.plan, self.tokenizer)
        settle_heap()  # the plan and everything loaded: never scanned by a collection in the window
        # Collections run where the dispatcher has slack (after recording), not wherever an
        # allocation happens to trip the threshold: a collection inside a send is dispatch lag.
        with collector_paused():
            return await self._run(t0_ns, settle)

    async def _run(self, t0_ns: int | None, settle: bool) -> RunOutcome:
        self.t0 = self.clock.now_ns() + START_DELAY_NS if t0_ns is None else t0_ns
        self.backend.set_origin(self.t0)
        rec = self.recorder = Recorder(
            self.t0, self.interval_ns, self.plan.window_start_ns, self.plan.window_end_ns
        )
        # one of several workers, with a window opened by its first measured request: the
        # others may open it earlier, so the requests that straddle this one's opening are kept
        rec.window.keep_before_start = self.plan.window_start_ns is None and self.plan.stride[1] > 1
        rec.goodput = self.goodput
        backlog = self._backlog = RecordingBacklog(
            rec, self.clock.now_ns, lambda: self._next_due_ns, lambda: self._unstarted > 0
        )
        if self.keep_records:
            rec.records = []
        if self.profile is not None:
            rec.profile = self.profile
            self.profile.arm(self.t0)
        loop_lag = LatencyHistogram()
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
            self.users.dispatch_closed() if closed else self._dispatch_open()
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
        probe.cancel()
        watchdog.cancel()
        if window_opens is not None:
            window_opens.cancel()
        await asyncio.gather(
            probe,
            watchdog,
            dispatch,
            *([window_opens] if window_opens else []),
            return_exceptions=True,
        )
        if self.profile is not None:  # an interrupted run waits for no profiler
            await self.profile.finish(wait=self._cancel_reason != "interrupted")
        backlog.record_all()  # nothing more to dispatch
        if settle:
            rec.close(self.stopped_ns)
        else:
            rec.close_intervals()
        status = {"interrupted": "interrupted", "failed": "failed"}.get(
            self._cancel_reason or "", "ok"
        )
        gc.unfreeze()  # a sweep's next point settles its own heap
        return RunOutcome(
            rec,
            self.t0,
            self.clock.now_ns(),
            status,
            loop_lag,
            self.sent,
            self.interrupted,
            self._failure,
            self.throttled,
            sessions=self.users.sessions,
            stopped_ns=self.stopped_ns,
            loop_busy=busy_share_since(busy_from),
            prompts_at_send=0 if self._prompts is None else self._prompts.left,
            internal_error=self.internal_error,
        )

    def stats(self, percentiles: bool = True) -> LiveStats:
        """Live counts for the progress display: cheap enough to poll a few times a second.
        The live percentiles merge histograms (about 0.6 ms of event loop on wide ones): a
        worker's heartbeat leaves them out unless a display shows them."""
        rec = self.recorder
        end = self.plan.window_end_ns
        return LiveStats(
            elapsed_s=0.0 if self.t0 is None else max(0, self.clock.now_ns() - self.t0) / 1e9,
            window_end_s=None if end is None else end / 1e9,
            planned=self.plan.planned_count,
            sent=self.sent,
            in_flight=self.in_flight,
            completed=0 if rec is None else rec.completed + rec.warmup,
            failed=0 if rec is None else rec.failed,
            latency=LivePercentiles.of(rec.live_histograms())
            if rec is not None and percentiles
            else LivePercentiles(),
            gpu_util_pct=None if self.gpu_probe is None else self.gpu_probe(),
        )

    # -- dispatch -------------------------------------------------------------------------------

    def origin(self) -> tuple[int, Recorder]:
        """t0 and the recorder: run() sets both before anything is dispatched."""
        assert self.t0 is not None and self.recorder is not None
        return self.t0, self.recorder

    def _recording(self) -> RecordingBacklog:
        assert self._backlog is not None  # run() makes it before anything is dispatched
        return self._backlog

    async def _dispatch_open(self) -> None:
        t0, _ = self.origin()
        if self.plan.multi_turn:
            for turns in self.plan.sessions():
                assert turns[0].offset_ns is not None  # a session starts at its arrival
                intended = t0 + turns[0].offset_ns
                await self.clock.sleep_until(intended)
                self.spawn(self.users.session(turns, intended, None), request=False)
            return
        try:
            for req in self.plan.requests:
                assert req.offset_ns is not None  # an open-loop plan places every request
                intended = self._next_due_ns = t0 + req.offset_ns
                await self.clock.sleep_until(intended)
                held_until = await self.throttle()
                self.spawn(self.drive(req, intended, held_until))
        finally:
            self._next_due_ns = None

    async def _tell_window_start(self, at_ns: int) -> None:
        await self.clock.sleep_until(at_ns)
        self.backend.window_started()

    async def throttle(self) -> int:
        """Wait for the max_rate limiter; returns the last time any send was held by it.

        Requests queued behind a held one reach the front late because of the ceiling, not because
        the harness lagged, so dispatch lag counts from max(intended, that time).
        """
        if self._ceiling is None:
            return 0
        if await self._ceiling.acquire():
            self.throttled += 1
            self._throttle_exit = self.clock.now_ns()
        return self._throttle_exit

    def spawn(self, coro: Coroutine[Any, Any, T], request: bool = True) -> asyncio.Task[T]:
        """Start a request (``drive``: unstarted until its first step runs) or a session."""
        self._unstarted += request
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- one request ------------------------------------------------------------------------------

    async def drive(
        self,
        req: PlannedRequest,
        intended: int,
        held_until: int,
        prompt_ids: list[int] | None = None,
    ) -> RequestState:
        # Latencies count from `intended`; dispatch lag from when the max_rate ceiling let go to
        # when this task first runs (not when it was created: the loop may run others first). A
        # backend that sees its bytes leave moves it later still (Sent).
        sent = self.clock.now_ns()
        self._unstarted -= 1
        lag_from = max(intended, held_until)
        st = RequestState(req, intended, sent, lag_from_ns=lag_from, handed_ns=sent)
        if sent - lag_from > LATE_FLOOR_NS:
            st.cpu_wait_ns = self._watch.cpu_wait_since(lag_from)
        self.sent += 1
        if not self.in_flight:  # silence is timed from the first send after an idle spell
            self._progress_ns = sent
        self.in_flight += 1
        try:
            if self.profile is not None:
                await self.profile.on_send(req.index)
            limit, cancels = self._time_limit(st)
            if limit is None:
                await self._consume(st, prompt_ids)
            else:
                await asyncio.wait_for(self._consume(st, prompt_ids), limit)
        except asyncio.TimeoutError:
            if cancels:  # the user gave up: the stream is closed, the server sees it go
                st.cancelled, st.done_ns = True, self.clock.now_ns()
            else:
                self._fail(st, "Timeout")
        except asyncio.CancelledError:
            if self._cancel_reason in (None, "drain"):
                self._fail(st, "DrainTimeout")
            else:
                self.interrupted += 1
                self.in_flight -= 1
                return st
        except BackendError as exc:
            self._fail(st, type(exc).__name__)
            self._failure = str(exc)
            self.request_stop("failed")
        except Exception as exc:
            # Backends say what failed on the server's side as Failed events; an exception
            # that gets here is a bug in loadtest, never the server's failure: the run stops
            # with what it measured, as an internal error, and this request is not counted.
            self._internal_error(st, exc)
            self.interrupted += 1
            self.in_flight -= 1
            return st
        self.in_flight -= 1
        if self.profile is not None:
            self.profile.on_done(req.index)
        self._recording().add(st)
        return st

    def _internal_error(self, st: RequestState, exc: Exception) -> None:
        """Stop the run for a bug in loadtest met while reading request ``st``: the traceback
        on stderr, the result saying so (and exiting 5), the request left uncounted."""
        import traceback

        if self.internal_error is None:
            traceback.print_exception(exc, file=sys.stderr)
            self.internal_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            self._failure = (
                f"internal error in loadtest while reading request {st.req.index} "
                f"({self.internal_error}): a bug in loadtest, not the server's failure; "
                "please report it with the traceback printed above"
            )
        self.request_stop("failed")

    def _time_limit(self, st: RequestState) -> tuple[float | None, bool]:
        """Seconds the request may run from now (None: no limit), and whether that limit is
        the plan's cancellation (``load.cancel.after`` from the intended send) rather than
        ``load.request_timeout``. A backend that stops itself is given a moment more, so its
        own stop (with the tokens it read) comes first."""
        now = self.clock.now_ns()
        timeout = self.load.request_timeout
        limit = None if timeout is None else timeout / 1e9
        cancel = self.load.cancel
        if st.req.cancel and cancel is not None and cancel.after is not None:
            until = max(0.0, (st.intended_ns + cancel.after - now) / 1e9)
            until += CANCEL_GRACE_S if self.backend.stops_itself else 0.0
            if limit is None or until < limit:
                return until, True
        return limit, False

    def _with_stop(self, st: RequestState) -> PlannedRequest:
        """The request as the backend gets it: one the plan cancels says when, or after how
        many tokens."""
        cancel, req = self.load.cancel, st.req
        if not req.cancel or cancel is None:
            return req
        stop_at = None if cancel.after is None else st.intended_ns + cancel.after
        return replace(req, stop_at_ns=stop_at, stop_after_tokens=cancel.after_tokens)

    async def _consume(self, st: RequestState, prompt_ids: list[int] | None) -> None:
        if prompt_ids is None and self.backend.needs_prompt_ids:
            if self._prompts is not None:
                prompt_ids = self._prompts.take(st.req.index)
            if prompt_ids is None:
                prompt_ids = self.plan.prompt_ids(st.req, self.tokenizer)
        cancel = self.load.cancel
        after_tokens = cancel.after_tokens if st.req.cancel and cancel is not None else None
        if self.backend.stops_itself:
            after_tokens = None  # the backend stops at the token, and says when (Cancelled)
        stream = self.backend.submit(self._with_stop(st), prompt_ids)
        try:
            await self._read(st, stream, after_tokens)
        finally:
            await stream.aclose()  # a cancelled stream's connection closes now, not at GC

    async def _read(self, st: RequestState, stream, after_tokens: int | None) -> None:
        now = self.clock.now_ns
        async for ev in stream:
            self._progress_ns = now()
            kind = type(ev)
            if kind is Tokens:
                st.stamps.extend(ev.t_ns)
                if after_tokens is not None and len(st.stamps) >= after_tokens:
                    st.cancelled, st.done_ns = True, now()
                    return
            elif kind is Sent:  # the backend saw the bytes leave: later than the hand-over
                st.sent_ns, st.wire = max(st.sent_ns, ev.t_ns), ev
                st.endpoint = ev.endpoint
                if st.sent_ns - (st.lag_from_ns or st.intended_ns) > LATE_FLOOR_NS:
                    st.cpu_wait_ns = self._watch.cpu_wait_since(st.lag_from_ns or st.intended_ns)
            elif kind is Admitted:
                st.admitted_ns = ev.t_ns
            elif kind is Finished:
                st.done_ns, st.output_tokens = ev.t_ns, ev.output_tokens
                st.response_id, st.reported_tokens = ev.response_id, ev.reported_tokens
                st.reply, st.prompt_tokens = ev.text, ev.input_tokens
                st.reasoning_tokens, st.first_answer_ns = ev.reasoning_tokens, ev.first_answer_ns
                if not ev.streamed:
                    st.unstamped_tokens = ev.output_tokens
            elif kind is Failed:
                st.done_ns, st.error = ev.t_ns, ev.error_type
                st.endpoint = st.endpoint or ev.endpoint
            elif kind is Cancelled:
                st.cancelled, st.done_ns = True, ev.t_ns
                return
        if st.done_ns is None:
            self._fail(st, "NoFinishEvent")

    def _fail(self, st: RequestState, error_type: str) -> None:
        st.error = error_type
        st.done_ns = self.clock.now_ns()

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
                if dispatch.done() and (not until_idle or not self._tasks):
                    return
                waiting = {stopper} | ({sleeper} if sleeper else set())
                waiting |= set(self._tasks) if dispatch.done() else {dispatch}
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if sleeper:
                sleeper.cancel()

    async def _cancel_all(self, reason: str) -> None:
        if self._cancel_reason is None:
            self._cancel_reason = reason
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch_for_silence(self) -> None:
        """End the run when the system under test stops answering: requests in flight and no
        event from it for ``load.stall_timeout``. Every other wait on the backend is bounded by
        this one, whatever the backend."""
        limit = self.load.stall_timeout
        while True:
            deadline = self._progress_ns + limit
            if self.in_flight and self.clock.now_ns() >= deadline:
                self._failure = (
                    f"the system under test stopped answering: no response event for "
                    f"{limit / 1e9:g} s with {self.in_flight} requests in flight (load.stall_timeout)"
                )
                self.request_stop("failed")
                return
            await self.clock.sleep_until(max(deadline, self.clock.now_ns() + limit // 4))
