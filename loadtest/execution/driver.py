"""One request driven from its send to its last event: the backend's stream read into the
request's state (stamps, the bytes' departure, admission, the end), its time limit and the
plan's cancellation applied, and the finished request handed to the recording backlog.

This is the per-request path: each event costs an attribute store and a type test here, no
more, so a token's cost is the backend's and the recorder's.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncGenerator, Callable
from dataclasses import replace

from loadtest.backends.base import Backend
from loadtest.config.scenario import Load
from loadtest.core.clock import Clock
from loadtest.core.errors import BackendError
from loadtest.core.events import (
    Admitted,
    BackendEvent,
    Cancelled,
    Failed,
    Finished,
    Sent,
    Tokens,
)
from loadtest.execution.answer_check import AnswerCheck
from loadtest.execution.backlog import RecordingBacklog
from loadtest.execution.loop_watch import LoopWatch
from loadtest.execution.prompts_ahead import PromptsAhead
from loadtest.execution.request import LATE_FLOOR_NS, RequestState
from loadtest.telemetry.profile_window import ProfileWindow
from loadtest.workload.plan import Plan
from loadtest.workload.requests import PlannedRequest
from loadtest.workload.tokenizer import Tokenizer

# a backend that stops a cancelled request itself has this long before the runner cancels it
CANCEL_GRACE_S = 1.0


class RequestDriver:
    """Drives each request to its end and counts them: sent, in flight, interrupted, and
    spawned but not started; ``progress_ns`` is the last event from the backend (or the first
    send after an idle spell), which the runner's silence watch reads."""

    def __init__(
        self,
        plan: Plan,
        backend: Backend,
        tokenizer: Tokenizer,
        clock: Clock,
        load: Load,
        watch: LoopWatch,
        *,
        profile: ProfileWindow | None,
        fail_run: Callable[[str | None], None],
        cancel_reason: Callable[[], str | None],
    ) -> None:
        """``fail_run(why)``: stop the run as failed (why None: already said);
        ``cancel_reason()``: why the run is cancelling its requests, None while it is not."""
        self.plan, self.backend, self.tokenizer, self.clock, self.load = (
            plan,
            backend,
            tokenizer,
            clock,
            load,
        )
        self.profile = profile
        self._watch = watch
        self._fail_run, self._cancel_reason = fail_run, cancel_reason
        self.prompts: PromptsAhead | None = None  # the plan's prompts, made before t0
        self.backlog: RecordingBacklog | None = None  # finished requests, recorded off-path
        self.sent = self.in_flight = self.interrupted = 0
        self.unstarted = 0  # spawned requests whose first step has not run
        self.progress_ns = 0
        self.internal_error: str | None = None  # a bug in loadtest stopped the run
        self.answers: AnswerCheck | None = None  # answers: whose answers come back to compare

    def _recording(self) -> RecordingBacklog:
        assert self.backlog is not None  # the run makes it before anything is dispatched
        return self.backlog

    async def drive(
        self,
        req: PlannedRequest,
        intended: int,
        held_until: int,
        prompt_ids: list[int] | None = None,
        slot_free_ns: int | None = None,
    ) -> RequestState:
        # Latencies count from `intended`; dispatch lag from when the max_rate ceiling let go,
        # or an in-flight slot came free (`slot_free_ns`; None: no cap), to when this task
        # first runs (not when it was created: the loop may run others first). A backend that
        # sees its bytes leave moves it later still (Sent).
        sent = self.clock.now_ns()
        self.unstarted -= 1
        lag_from = max(intended, held_until, slot_free_ns or 0)
        st = RequestState(req, intended, sent, lag_from_ns=lag_from, handed_ns=sent)
        if slot_free_ns is not None:
            st.slot_wait_ns = max(0, slot_free_ns - intended)
        if sent - lag_from > LATE_FLOOR_NS:
            st.cpu_wait_ns = self._watch.cpu_wait_since(lag_from)
        self.sent += 1
        if not self.in_flight:  # silence is timed from the first send after an idle spell
            self.progress_ns = sent
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
            if self._cancel_reason() in (None, "drain"):
                self._fail(st, "DrainTimeout")
            else:
                self.interrupted += 1
                self.in_flight -= 1
                return st
        except BackendError as exc:
            self._fail(st, type(exc).__name__)
            self._fail_run(str(exc))
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
            self._fail_run(
                f"internal error in loadtest while reading request {st.req.index} "
                f"({self.internal_error}): a bug in loadtest, not the server's failure; "
                "please report it with the traceback printed above"
            )
        else:
            self._fail_run(None)

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
            if self.prompts is not None:
                prompt_ids = self.prompts.take(st.req.index)
            if prompt_ids is None:
                prompt_ids = self.plan.prompt_ids(st.req, self.tokenizer)
        cancel = self.load.cancel
        after_tokens = cancel.after_tokens if st.req.cancel and cancel is not None else None
        if self.backend.stops_itself:
            after_tokens = None  # the backend stops at the token, and says when (Cancelled)
        req = self._with_stop(st)
        if self.answers is not None and self.answers.wants(req):
            req = replace(req, keep_answer=True)  # its answer is compared with its reference
        stream = self.backend.submit(req, prompt_ids)
        try:
            await self._read(st, stream, after_tokens)
        finally:
            await stream.aclose()  # a cancelled stream's connection closes now, not at GC

    async def _read(
        self,
        st: RequestState,
        stream: AsyncGenerator[BackendEvent | Cancelled, None],
        after_tokens: int | None,
    ) -> None:
        now = self.clock.now_ns
        async for ev in stream:
            self.progress_ns = now()
            if type(ev) is Tokens:
                st.stamps.extend(ev.t_ns)
                if after_tokens is not None and len(st.stamps) >= after_tokens:
                    st.cancelled, st.done_ns = True, now()
                    return
            elif type(ev) is Sent:  # the backend saw the bytes leave: later than the hand-over
                st.sent_ns, st.wire = max(st.sent_ns, ev.t_ns), ev
                st.endpoint, st.request_id = ev.endpoint, ev.request_id
                if st.sent_ns - (st.lag_from_ns or st.intended_ns) > LATE_FLOOR_NS:
                    st.cpu_wait_ns = self._watch.cpu_wait_since(st.lag_from_ns or st.intended_ns)
            elif type(ev) is Admitted:
                st.admitted_ns = ev.t_ns
            elif type(ev) is Finished:
                st.done_ns, st.output_tokens = ev.t_ns, ev.output_tokens
                st.response_id, st.reported_tokens = ev.response_id, ev.reported_tokens
                st.reply, st.prompt_tokens = ev.text, ev.input_tokens
                st.reasoning_tokens, st.first_answer_ns = ev.reasoning_tokens, ev.first_answer_ns
                if not ev.streamed:
                    st.unstamped_tokens = ev.output_tokens
            elif type(ev) is Failed:
                st.done_ns, st.error = ev.t_ns, ev.error_type
                st.endpoint = st.endpoint or ev.endpoint
                st.request_id = st.request_id or ev.request_id
            elif type(ev) is Cancelled:
                st.cancelled, st.done_ns = True, ev.t_ns
                return
        if st.done_ns is None:
            self._fail(st, "NoFinishEvent")

    def _fail(self, st: RequestState, error_type: str) -> None:
        st.error = error_type
        st.done_ns = self.clock.now_ns()
