"""The points a session's live exports read (``live_metrics``' Prometheus endpoint, and
``otlp_metrics``' pushes): a running point's figures read on its own event loop when asked
(nothing is counted on the request path), a finished point's last figures and verdicts kept."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from loadtest.execution.live import LiveStats
from loadtest.reporters.progress import Rates
from loadtest.results.stability import SHORTFALL
from loadtest.results.validity import too_late

Labels = tuple[str, str, str, str]  # scenario, run, point, model
SNAPSHOT_TIMEOUT_S = 5.0  # a read waits this long for the event loop, then keeps the last
# Running points are read on their loops at most once in this long: every scraper in it (and
# scrapers at once, who wait for the one read) is served the same figures, so scrapes cost the
# run the same whatever their number. Scrapers ask every few seconds: none sees staler figures.
READ_EVERY_S = 1.0
BACKLOG_SPAN_S = 10.0  # a live backlog's growth is judged over this long


class Polled(Protocol):
    """A running point: a runner, or a group of worker processes."""

    def stats(self, percentiles: bool = ..., totals: bool = ...) -> LiveStats: ...


@dataclass
class LivePoint:
    labels: Labels
    source: Polled | None  # None once the point is done
    loop: asyncio.AbstractEventLoop | None
    started_unix_ns: int = field(default_factory=time.time_ns)
    last: LiveStats | None = None
    verdicts: dict[str, bool] = field(default_factory=dict)
    rates: Rates = field(default_factory=Rates)
    rate_now: tuple[float | None, float | None] = (None, None)
    # the client's lag limits (dispatch, loop; ns): a running point is judged valid so far
    limits: tuple[int, int] | None = None
    backlogs: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=256))

    def judge(self, stats: LiveStats) -> None:
        """A running point's verdicts so far: valid while neither the dispatch lag nor the
        event loop's is over its limit (the rule metrics.json judges by); unsteady once an
        open loop delivered under 95% of what it offered (the last 5 s) while its backlog grew
        past its noise over the last ``BACKLOG_SPAN_S``, as the stability verdict judges a
        window. Neither is the final verdict: that judges the whole window, at its end."""
        totals = stats.totals
        if totals is None:
            return
        if self.limits is not None:
            lags = zip(("dispatch_lag", "loop_lag"), self.limits)
            self.verdicts["valid"] = not any(
                metric in totals.histograms and too_late(totals.histograms[metric], limit)
                for metric, limit in lags
            )
        if totals.backlog is None:
            return
        now = time.monotonic()
        self.backlogs.append((now, totals.backlog))
        then = next((b for t, b in reversed(self.backlogs) if now - t >= BACKLOG_SPAN_S), None)
        offered, delivered = self.rate_now
        if then is None or offered is None or delivered is None:
            return
        noise = 3 * math.sqrt(max(then, totals.backlog) + 1)
        falling_behind = delivered < (1 - SHORTFALL) * offered
        self.verdicts["steady"] = not (falling_behind and totals.backlog - then > noise)


class LivePoints:
    """A session's points, shared between the event loop (``watch``, ``done``) and the
    exports' threads (``read``)."""

    def __init__(self) -> None:
        self._points: dict[Labels, LivePoint] = {}
        self._lock = threading.Lock()
        self.finished_at: float | None = None  # monotonic s: the last point's end, none running
        self._reading = threading.Lock()  # one read of the loops at a time
        self._read_at: float | None = None  # monotonic s of the latest read (None: stale)
        self.generation = 0  # counts the points' starts and ends: a view made before is stale

    def watch(self, labels: Labels, source: Polled, limits: tuple[int, int] | None = None) -> None:
        """A point starts (on its event loop): its figures are read from ``source``, and
        judged against the client's lag ``limits`` (dispatch, loop; ns) where given."""
        point = LivePoint(labels, source, asyncio.get_running_loop(), limits=limits)
        with self._lock:
            self._points[labels] = point
            self.finished_at = None
            self._read_at = None
            self.generation += 1

    def done(self, labels: Labels, final: LiveStats, verdicts: dict[str, bool]) -> None:
        """A point ends: its final figures and verdicts, kept as they are from now on."""
        with self._lock:
            point = self._points.setdefault(labels, LivePoint(labels, None, None))
            point.source, point.loop, point.last = None, None, final
            point.verdicts = dict(verdicts)
            self.finished_at = time.monotonic()
            self.generation += 1

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._points)

    def read(self) -> list[LivePoint]:
        """Every point with its figures now (a running one's read on its loop, its rates
        updated; one whose loop is busy past ``SNAPSHOT_TIMEOUT_S`` keeps its last), or as
        read less than ``READ_EVERY_S`` ago: callers at once wait for one read, not each
        their own."""
        with self._reading:
            with self._lock:
                points = list(self._points.values())
                fresh = (
                    self._read_at is not None and time.monotonic() - self._read_at < READ_EVERY_S
                )
            if not fresh:
                self._read_loops(points)
                self._read_at = time.monotonic()
        return points

    def _read_loops(self, points: list[LivePoint]) -> None:
        for point in points:
            stats = _snapshot(point)
            if stats is None:
                continue
            with self._lock:
                if point.source is None:  # it ended while being read: its final figures stand
                    continue
                point.last = stats
                point.rate_now = point.rates.update(stats)
                point.judge(stats)


def _snapshot(point: LivePoint) -> LiveStats | None:
    loop = point.loop
    if point.source is None or loop is None or loop.is_closed():
        return None

    async def snapshot() -> LiveStats | None:  # on the loop, where ``done`` ends the point
        source = point.source
        return None if source is None else source.stats(percentiles=False, totals=True)

    future = asyncio.run_coroutine_threadsafe(snapshot(), loop)
    try:
        return future.result(SNAPSHOT_TIMEOUT_S)
    except Exception:  # the loop busy past the timeout, or gone: the last is kept
        future.cancel()
        return None
