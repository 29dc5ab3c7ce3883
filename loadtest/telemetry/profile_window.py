"""A profiler capture window on the run's clock: when it opens and closes, which requests it touched.

The window opens at ``t0 + start`` (or when request ``first`` is sent) and closes at
``+ duration`` (or when request ``last`` is done). Opening and closing are commands to the
backend (the engine worker runs torch.profiler); the window counts from just before the open
command to the moment the close is confirmed, so stopping the profiler, which takes time, is
inside it. A request is *profiled* when its [sent, done] overlaps the window; profiling perturbs
it, so by default its latencies are kept out of the statistics (it is still counted and flagged).

A profile window never costs the run: each call to the profiler is bounded (``call_timeout``),
the stop is sent once, a profiler that did not start (a server without one answers 404) flags
and excludes nothing and says why, and a stop that does not answer closes the window at its
deadline, saying so. An interrupted run does not wait for the profiler.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from loadtest.backends.base import Backend
from loadtest.config.observing import Profile
from loadtest.core.clock import Clock
from loadtest.core.json_types import JsonObject
from loadtest.telemetry.profile_section import Perturbation, ProfileSection, Span

T = TypeVar("T")


class ProfileWindow:
    """A profiler capture window (by time or request index) and the requests that overlapped it."""

    def __init__(self, spec: Profile, backend: Backend[Any], clock: Clock, out_dir: Path) -> None:
        self.spec, self.backend, self.clock, self.out_dir = spec, backend, clock, out_dir
        self.start_ns: int | None = None
        self.end_ns: int | None = None
        self.result: JsonObject = {}  # what the backend's profiler answered
        self.warnings: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._closing = False  # the stop is sent once, whatever asks for it
        self.supported = backend.supports_profiling
        self.ran = False  # the profiler started: only then are requests flagged
        # what the profiler cost: the requests in flight when it opened, the most at once
        # after, and when they were back to about as many after it closed (the backlog it
        # caused drained); requests sent before then were delayed by it
        self._in_flight = 0
        self.backlog_at_open: int | None = None
        self.backlog_peak = 0
        self.drained_ns: int | None = None

    # -- triggers (called by the runner) --------------------------------------------------------

    def arm(self, t0: int) -> None:
        """Fix the window's times against t0."""
        if self.spec.start is not None:
            self._task = asyncio.create_task(self._timed(t0))

    async def on_send(self, index: int) -> None:
        """Before request ``index`` goes out: the first request of a request window opens it, and
        waits for the profiler to be on, so that request is inside."""
        if self.spec.requests and index == self.spec.requests[0] and self.start_ns is None:
            self._task = asyncio.ensure_future(self._open())
            await asyncio.shield(self._task)
        self._in_flight += 1
        if self.backlog_at_open is not None and self.drained_ns is None:
            self.backlog_peak = max(self.backlog_peak, self._in_flight)

    def on_done(self, index: int) -> None:
        """A request finished: close a count-based window after its last request; once the
        window is closed, note when the backlog it caused has drained."""
        self._in_flight -= 1
        if self.spec.requests and index == self.spec.requests[1] and self._task is not None:
            self._task = asyncio.create_task(self._close_after(self._task))
        if self.end_ns is not None and self.drained_ns is None and self.ran:
            b0 = self.backlog_at_open or 0
            if self._in_flight <= b0 + 3 * math.sqrt(b0 + 1):  # a queue's own wander
                self.drained_ns = self.clock.now_ns()

    async def finish(self, wait: bool = True) -> None:
        """At the end of the run: a window still open closes now (its stop bounded as ever);
        without ``wait`` (an interrupted run) nothing is waited for."""
        if self._task is not None and not self._task.done():
            if not wait or (self.spec.start is not None and not self._closing):
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.start_ns is not None and self.end_ns is None:
            if wait:
                await self._close()
            else:
                self._give_up("the run was interrupted before the profiler's stop answered")

    # -- the window ---------------------------------------------------------------------------

    async def _timed(self, t0: int) -> None:
        start, duration = self.spec.start, self.spec.duration
        assert start is not None and duration is not None  # a window by time: the spec's rule
        await self.clock.sleep_until(t0 + start)
        await self._open()
        await self.clock.sleep_until(t0 + start + duration)
        await self._close()

    async def _open(self) -> None:
        self.start_ns = self.clock.now_ns()
        if not self.supported:
            return
        self.backlog_at_open = self.backlog_peak = self._in_flight
        why = await self._bounded("start", self.backend.profile_start(self.spec))
        if why is None:
            self.ran = True
            return
        self.result["profiler"] = f"none: it did not start ({why})"
        self.warnings.append(
            f"profile window: the profiler did not start ({why}); no request was flagged or "
            "left out of the figures"
        )

    async def _close_after(self, opening: asyncio.Task[None]) -> None:
        await opening
        await self._close()

    async def _close(self) -> None:
        if self._closing or self.end_ns is not None:
            return
        self._closing = True
        if self.supported and self.ran:
            answer = await self._bounded("stop", self.backend.profile_stop(str(self.out_dir)))
            if isinstance(answer, str):
                self._give_up(answer)
                return
            self.result.update(answer)
        self.end_ns = self.clock.now_ns()

    def _give_up(self, why: str) -> None:
        """Close the window now: the profiler's stop did not answer (it may still record)."""
        self.end_ns = self.clock.now_ns()
        self.result["profiler"] = f"stopping failed: {why}"
        self.warnings.append(
            f"profile window: {why}; the window was closed then, and requests after it are "
            "not flagged (the server's profiler may still be recording, and its engine may "
            "not answer)"
        )

    async def _bounded(self, what: str, call: Awaitable[T]) -> T | str:
        """The profiler's answer, or why there was none within ``call_timeout``."""
        limit = self.spec.call_timeout / 1e9
        try:
            return await asyncio.wait_for(call, limit)
        except asyncio.TimeoutError:
            return f"the profiler's {what} did not answer within {limit:g} s (profile.call_timeout)"

    def overlaps(self, sent_ns: int, done_ns: int) -> bool:
        """Whether a request sent at ``sent_ns`` and done at ``done_ns`` was perturbed by a
        profiler that ran: it overlapped the capture, or was sent before the backlog the
        capture caused had drained (decided as requests finish: one that finishes before the
        drain was sent before it)."""
        if not self.ran or self.start_ns is None or done_ns < self.start_ns:
            return False
        return self.drained_ns is None or sent_ns <= self.drained_ns

    def perturbation(self, t0: int) -> Perturbation | None:
        """What the capture cost the run: how long it lasted against the length asked for, the
        backlog it caused, and when that backlog drained (None: not by the run's end)."""
        if not self.ran or self.start_ns is None or self.end_ns is None:
            return None
        return Perturbation(
            asked_s=None if self.spec.duration is None else self.spec.duration / 1e9,
            lasted_s=round((self.end_ns - self.start_ns) / 1e9, 6),
            backlog_at_open=self.backlog_at_open,
            backlog_peak=self.backlog_peak,
            drained_s=_seconds(self.drained_ns, t0),
            drain_s=_seconds(self.drained_ns, self.end_ns),
        )

    def summary(self, t0: int, flagged: int, export: JsonObject | None = None) -> ProfileSection:
        """When the window opened and closed (seconds from t0), how many requests it touched,
        what it cost, and what the profiler said and exported (``export``: an engine's trace
        and tables, written after the run)."""
        out: dict[str, object] = {  # sections and figures, validated below
            "window": Span(start_s=_seconds(self.start_ns, t0), end_s=_seconds(self.end_ns, t0)),
            "requests_flagged": flagged,
            "perturbation": self.perturbation(t0),
            "excluded_from_stats": self.spec.exclude_from_stats and self.ran,
        }
        if not self.supported:
            out["profiler"] = (
                "none: this backend has no profiler (no request was flagged or left out)"
            )
        return ProfileSection.model_validate({**out, **self.result, **(export or {})})


def _seconds(t_ns: int | None, origin_ns: int) -> float | None:
    return None if t_ns is None else round((t_ns - origin_ns) / 1e9, 6)
