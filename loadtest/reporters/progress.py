"""Live progress, fed by polling ``runner.stats()`` (cheap, off the hot path): on a terminal a
rich display redrawn 4 times a second; in a log (CI) one plain line every few seconds. Both show
elapsed and time left, offered vs delivered rate over the last seconds, live TTFT/ITL p50/p99,
failures and the GPUs' kernel-active %."""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from rich.console import Console
from rich.live import Live
from rich.table import Table

from loadtest.execution.live import LiveStats
from loadtest.reporters.console import make_console, styled

RATE_SPAN_S = 5.0  # offered and delivered rates are over the last this many seconds


class Rates:
    """Offered (sent) and delivered (completed) requests a second over the last RATE_SPAN_S."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, int, int]] = deque([(0.0, 0, 0)])

    def update(self, s: LiveStats) -> tuple[float | None, float | None]:
        self.samples.append((s.elapsed_s, s.sent, s.completed + s.failed))
        while len(self.samples) > 2 and s.elapsed_s - self.samples[1][0] >= RATE_SPAN_S:
            self.samples.popleft()
        (t0, sent0, done0), (t1, sent1, done1) = self.samples[0], self.samples[-1]
        if t1 - t0 <= 0:
            return None, None
        return (sent1 - sent0) / (t1 - t0), (done1 - done0) / (t1 - t0)


def time_left_s(s: LiveStats) -> float | None:
    """Seconds to the window's end (a timed run), or at the pace so far (a counted one)."""
    if s.window_end_s is not None:
        return max(0.0, s.window_end_s - s.elapsed_s)
    finished = s.completed + s.failed
    if s.planned and finished:
        return s.elapsed_s / finished * max(0, s.planned - finished)
    return None


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def fields(s: LiveStats, offered: float | None, delivered: float | None) -> list[str]:
    """The figures both displays show, as short phrases."""
    left, end = time_left_s(s), s.window_end_s
    clock = f"{s.elapsed_s:.0f} s"
    if end is not None and s.elapsed_s >= end:
        clock += f" (window ended at {end:.0f} s: draining)"
    elif end is not None:
        clock += f" of {end:.0f} s ({left:.0f} s left)"
    elif left is not None:
        clock += f" (about {left:.0f} s left)"
    planned = f"/{s.planned}" if s.planned else ""
    out = [
        clock,
        f"sent {s.sent}{planned}, done {s.completed}, in flight {s.in_flight}, failed {s.failed}",
        f"offered {_rate(offered)} req/s, delivered {_rate(delivered)} req/s",
    ]
    lat = s.latency
    if lat.ttft_p50_ms is None and lat.e2e_p50_ms is not None:
        # answers with no token stream (embeddings, rerank): their latency is the whole answer's
        out.append(f"E2E p50 {_ms(lat.e2e_p50_ms)} p99 {_ms(lat.e2e_p99_ms)} ms")
    else:
        out += [
            f"TTFT p50 {_ms(lat.ttft_p50_ms)} p99 {_ms(lat.ttft_p99_ms)} ms",
            f"ITL p50 {_ms(lat.itl_p50_ms)} p99 {_ms(lat.itl_p99_ms)} ms",
        ]
    gpu = s.gpu_util_pct
    if gpu:
        out.append("GPU " + " ".join(f"{u:.0f}%" for u in gpu))
    return out


def _panel(parts: list[str], failed: int) -> Table:
    """Three short lines (each fits 80 columns): time and counts, rates and GPU, latencies."""
    # styles as Text spans, never markup: every console loadtest prints to has markup off
    grid = Table.grid()
    grid.add_row(styled((parts[0], "bold"), "  ", (parts[1], "red") if failed else parts[1]))
    grid.add_row(styled("  ".join([parts[2], *parts[5:]])))
    grid.add_row(styled("  ".join(parts[3:5])))
    return grid


class Polled(Protocol):
    """What a display polls: a runner, or a group of worker processes."""

    def stats(self) -> LiveStats: ...


Display = Callable[[Polled], Coroutine[Any, Any, None]]


def live_progress(console: Console | None = None, period_s: float = 0.25) -> Display:
    """A coroutine factory that shows a running point's progress on the terminal."""
    shown_on = console or make_console(stderr=True)

    async def show(runner: Polled) -> None:
        rates = Rates()
        with Live(Table.grid(), console=shown_on, refresh_per_second=4, transient=True) as live:
            while True:
                await asyncio.sleep(period_s)
                s = runner.stats()
                live.update(_panel(fields(s, *rates.update(s)), s.failed))

    return show


def plain_progress(period_s: float = 5.0, write: Callable[[str], None] | None = None) -> Display:
    """For a log rather than a terminal (CI): one plain line every ``period_s`` seconds."""

    def to_stderr(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    say = write or to_stderr

    async def show(runner: Polled) -> None:
        rates = Rates()
        while True:
            await asyncio.sleep(period_s)
            s = runner.stats()
            say("progress: " + "; ".join(fields(s, *rates.update(s))))

    return show


def choose(quiet: bool, terminal: bool) -> Display | None:
    """The progress display for this output: none, a live display, or plain lines for a log."""
    if quiet:
        return None
    return live_progress() if terminal else plain_progress()
