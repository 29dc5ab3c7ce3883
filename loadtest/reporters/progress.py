"""The live progress line (rich), fed by polling the runner 4 times a second: cheap, off the hot path."""

from __future__ import annotations

import asyncio

from rich.console import Console
from rich.live import Live
from rich.text import Text

from loadtest.reporters.console import make_console


def live_progress(console: Console | None = None, period_s: float = 0.25):
    """A coroutine factory that shows a running point's progress on the terminal."""
    console = console or make_console(stderr=True)

    async def show(runner) -> None:
        last_done, last_t = 0, 0.0
        rate = 0.0
        with Live(
            Text("starting..."), console=console, refresh_per_second=4, transient=True
        ) as live:
            while True:
                await asyncio.sleep(period_s)
                s = runner.stats()
                dt = s["elapsed_s"] - last_t
                if dt >= 1.0:
                    rate, last_done, last_t = (
                        (s["completed"] - last_done) / dt,
                        s["completed"],
                        s["elapsed_s"],
                    )
                planned = f"/{s['planned']}" if s["planned"] else ""
                p99 = "-" if s["ttft_p99_ms"] is None else f"{s['ttft_p99_ms']:.1f} ms"
                live.update(
                    Text(
                        f"{s['elapsed_s']:7.1f} s  sent {s['sent']}{planned}  done {s['completed']}  "
                        f"in flight {s['in_flight']}  failed {s['failed']}  {rate:.1f} req/s  p99 TTFT {p99}"
                    )
                )

    return show


def plain_progress(period_s: float = 5.0, write=None):
    """For a log rather than a terminal (CI): one plain line every ``period_s`` seconds."""
    import sys

    write = write or (lambda line: print(line, file=sys.stderr, flush=True))

    async def show(runner) -> None:
        last_done, last_t = 0, 0.0
        while True:
            await asyncio.sleep(period_s)
            s = runner.stats()
            dt = s["elapsed_s"] - last_t
            rate = (s["completed"] - last_done) / dt if dt > 0 else 0.0
            last_done, last_t = s["completed"], s["elapsed_s"]
            planned = f"/{s['planned']}" if s["planned"] else ""
            p99 = "-" if s["ttft_p99_ms"] is None else f"{s['ttft_p99_ms']:.1f} ms"
            write(
                f"progress: {s['elapsed_s']:.0f} s, sent {s['sent']}{planned}, done "
                f"{s['completed']}, in flight {s['in_flight']}, failed {s['failed']}, "
                f"{rate:.1f} req/s, p99 TTFT {p99}"
            )

    return show


def choose(quiet: bool, terminal: bool):
    """The progress display for this output: none, a live line, or plain lines for a log."""
    if quiet:
        return None
    return live_progress() if terminal else plain_progress()
