"""More load than one process can make: client workers, one plan, one t0, one merged result.

The coordinator (this process) opens ``load.workers`` workers through channels: processes on
this host (``process_workers.ProcessChannel``) or Ray actors on a cluster's nodes
(``execution.ray_workers``). Each worker loads its own backend (its own connections), builds
the same plan from the seeds, takes its share (``Plan.share``) and says it is ready, with a
digest of the plan it built; every worker must have built the same one. The coordinator then
learns each worker's clock offset (0 on this host: one monotonic clock), picks t0 on its own
clock, and each worker dispatches its share against it, records into its own histograms and
sends its outcome back; they are merged losslessly (``merge.merge``) into one outcome, with
each worker's own counts, lags and clock beside it.

Every wait is bounded. A worker is heard from twice a second; one that dies, fails, or falls
silent for ``SILENT_AFTER_S`` ends the run as failed, the others are stopped, and what they
measured is kept. A worker whose coordinator is gone stops by itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from loadtest.backends import combine_facts
from loadtest.config.loading import LoadedScenario
from loadtest.core.clock import Clock
from loadtest.core.errors import BackendError
from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.clock_sync import SAME_CLOCK, ClockOffset
from loadtest.execution.live import (
    LIVE_METRICS,
    LivePercentiles,
    LiveStats,
    LiveTotals,
    LiveWants,
)
from loadtest.execution.merge import merge_outcomes
from loadtest.execution.runner import RunOutcome
from loadtest.execution.worker_part import WorkerPart
from loadtest.execution.worker_side import HEARTBEAT_S, STOP_GRACE_S

SILENT_AFTER_S = 15.0  # no word from a running worker for this long: it is stuck
T0_LEAD_NS = 100_000_000  # t0 this far after "go" is sent: every worker is waiting by then
EXIT_GRACE_S = 5.0  # a worker asked to close has this long to exit, before it is killed

Post = Callable[[tuple], None]


class Channel(Protocol):
    """The coordinator's line to one worker. Messages from the worker are posted as tuples:
    ``("ready", info)``, ``("stats", counts)``, ``("done", outcome, facts)``,
    ``("error", text)`` (it failed) and ``("exited", text)`` (it is gone)."""

    where: dict  # where it runs, for the result: pid, host, node

    async def open(self, post: Post) -> None: ...

    async def sync_clock(self) -> ClockOffset: ...

    def send(self, msg: tuple) -> None: ...

    def kill(self) -> None: ...

    async def close(self, grace_s: float) -> None: ...


@dataclass
class WorkerReady:
    """What the workers loaded (worker 0's view; every worker loads the same spec)."""

    name: str
    details: dict
    notices: list[str]
    planned: int | None


class WorkerGroup:
    """The coordinator's side: open the workers, run them from one t0, merge what they measured.

    Quacks like a ``Runner`` where the session and the progress display need it (``stats``,
    ``request_stop``)."""

    def __init__(self, loaded: LoadedScenario, clock: Clock, channels: list[Channel]) -> None:
        self.loaded, self.clock, self.channels = loaded, clock, channels
        self.count = len(channels)
        self.gpu_probe: Callable[[], list[float] | None] | None = None
        # heartbeats carry live percentiles only for a display, totals only for a metrics
        # endpoint: each costs the worker's loop
        self.wants = LiveWants()
        self._inbox: asyncio.Queue[tuple[int, tuple]] = asyncio.Queue()
        self._last_heard: list[float] = [0.0] * self.count
        # each worker's latest heartbeat, and its live histograms decoded
        self._stats: list[LiveStats | None] = [None for _ in channels]
        self._totals: list[LiveTotals | None] = [None for _ in channels]
        self._live: list[dict[str, LatencyHistogram]] = [{} for _ in channels]
        self._clocks: list[ClockOffset] = [SAME_CLOCK] * self.count
        self._stop: tuple[str, int] | None = None
        self._planned: int | None = None
        self._details: dict = {}
        self.t0: int | None = None

    # -- start --------------------------------------------------------------------------------

    async def start(self, timeout_s: float) -> WorkerReady:
        """Open the workers and wait, at most ``timeout_s``, until every one is ready; then
        learn their clocks."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for i, channel in enumerate(self.channels):
            self._last_heard[i] = loop.time()
            await asyncio.wait_for(channel.open(self._poster(i)), max(0.0, deadline - loop.time()))
        ready: dict[int, dict] = {}
        while len(ready) < self.count:
            i, msg = await self._next(deadline, "to start")
            if msg[0] == "ready":
                ready[i] = msg[1]
            elif msg[0] in ("error", "exited"):
                raise BackendError(f"worker {i} of {self.count}: {msg[1]}")
        _same_plans(ready)
        self._clocks = list(await asyncio.gather(*(c.sync_clock() for c in self.channels)))
        first = ready[0]
        self._planned, self._details = first["planned"], first["details"]
        return WorkerReady(first["name"], first["details"], first["notices"], first["planned"])

    def _poster(self, i: int) -> Post:
        loop = asyncio.get_running_loop()

        def post(msg: tuple) -> None:
            self._last_heard[i] = loop.time()
            if msg[0] == "stats":  # decoded once here, however often a display polls
                beat: LiveStats | None = msg[1]
                if beat is not None:
                    encoded = beat.histograms or {}
                    self._live[i] = {m: LatencyHistogram.decode(t) for m, t in encoded.items()}
                    if beat.totals is not None:
                        self._totals[i] = beat.totals
                    self._stats[i] = replace(beat, histograms=None, totals=None)
            else:
                self._inbox.put_nowait((i, msg))

        return post

    # -- run ----------------------------------------------------------------------------------

    async def run(self) -> tuple[RunOutcome, dict]:
        """Run every worker from one t0; the merged outcome and the backends' combined facts."""
        loop = asyncio.get_running_loop()
        self.t0 = self.clock.now_ns() + T0_LEAD_NS
        for i, channel in enumerate(self.channels):
            self._last_heard[i] = loop.time()
            channel.send(("go", self.t0, self.wants))
        parts: dict[int, tuple[RunOutcome, dict]] = {}
        lost: dict[int, str] = {}
        failure: str | None = None
        stop_deadline: float | None = None
        while len(parts) + len(lost) < self.count:
            now = loop.time()
            for i in range(self.count):
                if i not in parts and i not in lost and now - self._last_heard[i] > SILENT_AFTER_S:
                    lost[i] = f"no word for {SILENT_AFTER_S:g} s (stuck; killed)"
                    self.channels[i].kill()
            if stop_deadline is not None and now > stop_deadline:
                for i in range(self.count):
                    if i not in parts and i not in lost:
                        lost[i] = f"did not stop within {STOP_GRACE_S:g} s (killed)"
                        self.channels[i].kill()
                break
            if len(parts) + len(lost) == self.count:
                break
            if lost and failure is None:
                failure = self._lost_failure(lost)
                self.request_stop("failed")
            if self._stop is not None and stop_deadline is None:
                stop_deadline = now + STOP_GRACE_S
            try:
                i, msg = await self._next(now + HEARTBEAT_S, None)
            except TimeoutError:
                continue
            if msg[0] == "done":
                parts[i] = (msg[1], msg[2])
                if msg[1].status == "failed" and failure is None:
                    failure = f"worker {i} of {self.count}: {msg[1].failure}"
                    self.request_stop("failed")
            elif msg[0] in ("error", "exited") and i not in parts:
                lost[i] = msg[1]
        if lost and failure is None:
            failure = self._lost_failure(lost)
        after = await asyncio.gather(
            *(self._clock_after(i, i in parts) for i in range(self.count)),
            return_exceptions=True,
        )
        assert self.t0 is not None
        outcome = merge_outcomes(
            [parts[i][0] for i in sorted(parts)],
            t0=self.t0,
            interval_ns=self.loaded.scenario.outputs.interval,
            stop=self._stop,
            end_ns=self.clock.now_ns(),
            failure=failure,
            lost=bool(lost),
            workers=[self._part(i, parts, lost, after[i]) for i in range(self.count)],
        )
        facts = [parts[i][1] for i in sorted(parts)]
        return outcome, combine_facts(self.loaded.scenario.backend, self._details, facts)

    def _lost_failure(self, lost: dict[int, str]) -> str:
        i = min(lost)
        return f"worker {i} of {self.count} was lost: {lost[i]}; what it measured is lost"

    async def _clock_after(self, i: int, answered: bool) -> ClockOffset | None:
        """The clock offset again after the run (a drift check), where there is one to check:
        another host's clock, of a worker still there."""
        if self._clocks[i] is SAME_CLOCK or not answered:
            return None
        return await self.channels[i].sync_clock()

    def _part(self, i: int, parts: dict, lost: dict, after) -> WorkerPart:
        where = self.channels[i].where
        clock = None if self._clocks[i] is SAME_CLOCK else self._clocks[i]
        clock_after = after if isinstance(after, ClockOffset) else None
        if i not in parts:
            return WorkerPart(
                i, where.get("pid"), "lost", failure=lost.get(i), where=where, clock=clock
            )
        o = parts[i][0]
        return WorkerPart(
            i,
            where.get("pid"),
            o.status,
            o.sent,
            o.recorder.completed,
            o.recorder.failed,
            o.recorder.whole["dispatch_lag"],
            o.loop_lag,
            o.failure,
            where,
            clock,
            clock_after,
        )

    # -- the runner's face --------------------------------------------------------------------

    def request_stop(self, reason: str = "interrupted") -> None:
        """Stop every worker now; the stop's time is the coordinator's, so every part ends
        alike (each worker reads the coordinator's timeline)."""
        if self._stop is not None:
            return
        self._stop = (reason, self.clock.now_ns())
        for channel in self.channels:
            channel.send(("stop", *self._stop))

    def stats(self, percentiles: bool = True, totals: bool = False) -> LiveStats:
        """The workers' latest counts, summed, and percentiles of their live histograms pooled
        (a worst worker's p50 is not the run's); ``totals``: their latest totals, summed (what
        their heartbeats carry when ``wants.totals``)."""
        stats = [s for s in self._stats if s is not None]
        pooled = {metric: LatencyHistogram() for metric in LIVE_METRICS}
        for live in self._live:
            for metric, histogram in live.items():
                pooled[metric].add(histogram)
        return LiveStats(
            elapsed_s=0.0 if self.t0 is None else max(0, self.clock.now_ns() - self.t0) / 1e9,
            window_end_s=stats[0].window_end_s if stats else None,
            planned=self._planned,
            sent=sum(s.sent for s in stats),
            in_flight=sum(s.in_flight for s in stats),
            completed=sum(s.completed for s in stats),
            failed=sum(s.failed for s in stats),
            latency=LivePercentiles.of(pooled) if percentiles else LivePercentiles(),
            gpu_util_pct=None if self.gpu_probe is None else self.gpu_probe(),
            totals=self._summed_totals() if totals else None,
        )

    def _summed_totals(self) -> LiveTotals:
        out = LiveTotals()
        for part in self._totals:
            if part is not None:
                out.add(part)
        return out

    # -- messages -----------------------------------------------------------------------------

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
        """Close every worker (asked, then killed); bounded."""
        await asyncio.gather(*(c.close(EXIT_GRACE_S) for c in self.channels))
        self.channels = []


def _same_plans(ready: dict[int, dict]) -> None:
    """Every worker built the plan worker 0 built, or none runs: a node whose data file or
    tokenizer differs would send other prompts, and the merged result would describe neither."""
    first = ready[0]["fingerprint"]
    for i in sorted(ready):
        if ready[i]["fingerprint"] != first:
            raise BackendError(
                f"worker {i} built a different plan from worker 0's (digest "
                f"{ready[i]['fingerprint']} against {first}): its data files or tokenizer "
                "differ; every worker must read the same ones"
            )
