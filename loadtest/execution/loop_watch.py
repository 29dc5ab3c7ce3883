"""The event loop watched from inside the run: how late it may take an event made ready (the
loop lag, a validity check, and how late a token's stamp may be), and marks of how long the
loop's thread has waited, runnable, for a CPU, so a late send can say whether the machine held
the core.

A probe's lag is how long a callback made ready waits before it runs (the loop busy with
others), plus the time the thread waited for a CPU since the previous probe: a read that
became ready while another process held the core waited that long too, and a callback's wait
alone never sees it (the loop slept in its poll meanwhile)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from loadtest.core.clock import cpu_wait_ns
from loadtest.core.histogram import LatencyHistogram

LOOP_PROBE_NS = 10_000_000
VIRTUAL_PROBE_NS = 100_000_000


class LoopWatch:
    """A probe every ``LOOP_PROBE_NS`` on the loop it runs on, timed by ``now``, the thread's
    CPU waits marked at each. Not ``real`` (a virtual clock, whose loop is never late and
    whose time is not the CPU's): a probe every ``VIRTUAL_PROBE_NS`` and no marks (the probes
    and their /proc reads were a fifth of a simulated run's time)."""

    def __init__(self, now: Callable[[], int], real: bool = True) -> None:
        self._now = now
        self._cpu = real
        self._period_s = (LOOP_PROBE_NS if real else VIRTUAL_PROBE_NS) / 1e9
        # the loop thread's time waiting for a CPU, (ns, wait ns) at each of the last probes
        self._cpu_wait_marks: deque[tuple[int, int]] = deque(maxlen=16)

    async def probe(self, lag: LatencyHistogram) -> None:
        """Record the loop's lag into ``lag`` until cancelled, and mark the CPU wait."""
        loop = asyncio.get_running_loop()
        now = self._now
        before = cpu_wait_ns() if self._cpu else None
        while True:
            await asyncio.sleep(self._period_s)
            wait = cpu_wait_ns() if self._cpu else None
            off_cpu = 0
            if wait is not None:
                self._cpu_wait_marks.append((now(), wait))
                off_cpu = 0 if before is None else max(0, wait - before)
                before = wait
            loop.call_soon(_record_since, lag, now, now() - off_cpu)

    def cpu_wait_since(self, t_ns: int) -> int:
        """How long the loop's thread waited, runnable, for a CPU since the last probe mark
        before ``t_ns`` (an over-estimate by what it waited in the probe period before it); -1
        where unknown. Read only for late sends: a /proc read costs ~10 µs."""
        mark = next((w for t, w in reversed(self._cpu_wait_marks) if t <= t_ns), None)
        wait = cpu_wait_ns()
        return -1 if mark is None or wait is None else max(0, wait - mark)


def _record_since(hist: LatencyHistogram, now: Callable[[], int], t_ns: int) -> None:
    hist.record_ns(now() - t_ns)
