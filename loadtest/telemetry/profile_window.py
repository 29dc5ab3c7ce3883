"""A profiler capture window on the run's clock: when it opens and closes, which requests it touched.

The window opens at ``t0 + start`` (or when request ``first`` is sent) and closes at
``+ duration`` (or when request ``last`` is done). Opening and closing are commands to the
backend (the engine worker runs torch.profiler); the window counts from just before the open
command to the moment the close is confirmed, so stopping the profiler, which takes time, is
inside it. A request is *profiled* when its [sent, done] overlaps the window; profiling perturbs
it, so by default its latencies are kept out of the statistics (it is still counted and flagged).
"""

from __future__ import annotations

import asyncio
from pathlib import Path


class ProfileWindow:
    """A profiler capture window (by time or request index) and the requests that overlapped it."""

    def __init__(self, spec, backend, clock, out_dir: Path) -> None:
        self.spec, self.backend, self.clock, self.out_dir = spec, backend, clock, out_dir
        self.start_ns: int | None = None
        self.end_ns: int | None = None
        self.result: dict = {}
        self._task: asyncio.Task | None = None
        self.supported = backend.supports_profiling

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

    def on_done(self, index: int) -> None:
        """A request finished: close a count-based window after its last request."""
        if self.spec.requests and index == self.spec.requests[1] and self._task is not None:
            self._task = asyncio.create_task(self._close_after(self._task))

    async def finish(self) -> None:
        """At the end of the run: a window still open closes now."""
        if self._task is not None:
            if not self._task.done() and self.spec.start is not None:
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.start_ns is not None and self.end_ns is None:
            await self._close()

    # -- the window ---------------------------------------------------------------------------

    async def _timed(self, t0: int) -> None:
        await self.clock.sleep_until(t0 + self.spec.start)
        await self._open()
        await self.clock.sleep_until(t0 + self.spec.start + self.spec.duration)
        await self._close()

    async def _open(self) -> None:
        self.start_ns = self.clock.now_ns()
        if self.supported:
            await self.backend.profile_start(self.spec.model_dump())

    async def _close_after(self, opening: asyncio.Task) -> None:
        await opening
        await self._close()

    async def _close(self) -> None:
        if self.end_ns is not None:
            return
        if self.supported:
            self.result = await self.backend.profile_stop(str(self.out_dir))
        self.end_ns = self.clock.now_ns()

    def overlaps(self, sent_ns: int, done_ns: int) -> bool:
        """Whether a request sent at ``sent_ns`` and done at ``done_ns`` overlapped the capture."""
        if self.start_ns is None or done_ns < self.start_ns:
            return False
        return self.end_ns is None or sent_ns <= self.end_ns

    def summary(self, t0: int, flagged: int) -> dict:
        """When the window opened and closed (seconds from t0) and how many requests it touched."""
        rel = lambda t: None if t is None else round((t - t0) / 1e9, 6)  # noqa: E731
        out = {
            "window": {"start_s": rel(self.start_ns), "end_s": rel(self.end_ns)},
            "requests_flagged": flagged,
            "excluded_from_stats": self.spec.exclude_from_stats,
        }
        if not self.supported:
            out["profiler"] = (
                "none: this backend has no in-process profiler (requests are still flagged)"
            )
        out.update(self.result)
        return out
