"""The one clock: integer nanoseconds from ``time.monotonic_ns()``, and a virtual twin for tests.

Every timestamp in loadtest comes from a :class:`Clock`. ``MonotonicClock`` is the system-wide
monotonic clock (the same one the engine worker process and the GPU sampler stamp with).
``VirtualClock`` runs on a :class:`VirtualTimeLoop`: time stands still while any task can run and
jumps straight to the next timer when all are waiting, so a simulated 60 s run takes
milliseconds and every timing in it is exact.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

NS_PER_S = 1_000_000_000


class Clock(Protocol):
    """The time source the harness runs on: monotonic ns and sleeping until an absolute time."""

    def now_ns(self) -> int: ...

    async def sleep_until(self, t_ns: int) -> None: ...


class MonotonicClock:
    """``time.monotonic_ns()``; sleeps are accurate to a few µs.

    asyncio timers ride on epoll, which rounds timeouts up to whole milliseconds. Dispatch must be
    sub-millisecond, so the last ``spin_ns`` before a deadline are spent yielding to the loop
    (``sleep(0)``) instead: other tasks keep running, the deadline is met to within one loop turn.
    """

    def __init__(self, spin_ns: int = 1_500_000) -> None:
        self.spin_ns = spin_ns

    def now_ns(self) -> int:
        return time.monotonic_ns()

    async def sleep_until(self, t_ns: int) -> None:
        remaining = t_ns - time.monotonic_ns()
        if remaining > self.spin_ns:
            await asyncio.sleep((remaining - self.spin_ns) / NS_PER_S)
        while time.monotonic_ns() < t_ns:
            await asyncio.sleep(0)


class OffsetClock(MonotonicClock):
    """This host's monotonic clock, read on another host's timeline: ``now_ns()`` is what that
    host's clock reads now, given ``offset_ns`` = this clock minus that one (measured by round
    trips, ``execution.clock_sync``). A worker on another node runs on it, so that every time it
    stamps is on the coordinator's clock and merges with the other workers' as it is."""

    def __init__(self, offset_ns: int, spin_ns: int = 1_500_000) -> None:
        super().__init__(spin_ns)
        self.offset_ns = offset_ns

    def now_ns(self) -> int:
        return time.monotonic_ns() - self.offset_ns

    async def sleep_until(self, t_ns: int) -> None:
        await super().sleep_until(t_ns + self.offset_ns)


class _VirtualSelector:
    """Wraps the loop's selector: never blocks, advances virtual time by the timeout instead."""

    def __init__(self, inner: selectors.BaseSelector, loop: VirtualTimeLoop) -> None:
        self._inner = inner
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        events = self._inner.select(0)
        if not events and timeout:
            self._loop._advance(timeout)
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is virtual (starts at 1000 s so offsets are never negative).

    Only for code that waits on timers, not on real I/O: real I/O would never wake it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._virtual_ns = 1000 * NS_PER_S
        # asyncio's private selector and timer heap: the loop is virtual only through them.
        self._selector: Any = _VirtualSelector(self._selector, self)
        self._clock_resolution = 1e-9

    def _advance(self, timeout: float) -> None:
        scheduled = self._scheduled  # type: ignore[attr-defined]  # asyncio's private timer heap
        if scheduled:
            # Land exactly on the next timer's deadline: no float drift across a long run.
            self._virtual_ns = max(self._virtual_ns, round(scheduled[0].when() * NS_PER_S))
        else:
            self._virtual_ns += round(timeout * NS_PER_S)

    def time(self) -> float:
        return self._virtual_ns / NS_PER_S

    def now_ns(self) -> int:
        return self._virtual_ns


class VirtualClock:
    """The clock of a :class:`VirtualTimeLoop`; ``sleep_until`` lands exactly on ``t_ns``."""

    def __init__(self, loop: VirtualTimeLoop | None = None) -> None:
        self._loop = loop

    @property
    def loop(self) -> VirtualTimeLoop:
        if self._loop is None:
            loop = asyncio.get_running_loop()
            if not isinstance(loop, VirtualTimeLoop):
                raise RuntimeError(
                    "VirtualClock needs a VirtualTimeLoop (use loadtest.core.clock.run_virtual)"
                )
            self._loop = loop
        return self._loop

    def now_ns(self) -> int:
        return self.loop.now_ns()

    async def sleep_until(self, t_ns: int) -> None:
        delay = t_ns - self.now_ns()
        if delay > 0:
            await asyncio.sleep(delay / NS_PER_S)


def run_virtual(coro_fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    """Run ``coro_fn(clock, *args, **kwargs)`` on a fresh virtual-time loop; returns its result."""
    loop = VirtualTimeLoop()
    try:
        clock = VirtualClock(loop)
        return loop.run_until_complete(coro_fn(clock, *args, **kwargs))
    finally:
        loop.close()


def cpu_wait_ns() -> int | None:
    """How long the calling thread has waited, runnable, for a CPU since it started (Linux's
    scheduler statistics, ``/proc/thread-self/schedstat``), or None where the kernel does not
    say. The difference across a late send is time the machine, not the program, cost it."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def busy_start(clock: Clock) -> tuple[int, int] | None:
    """This thread's CPU time and the real time now, to take a busy share from; None on a
    virtual clock (its time is not the CPU's)."""
    if isinstance(clock, VirtualClock):
        return None
    return time.thread_time_ns(), time.monotonic_ns()


def busy_share_since(start: tuple[int, int] | None) -> float | None:
    """This thread's CPU time since ``start`` over the real time since: its busy share (near 1,
    the thread is its core's limit)."""
    if start is None:
        return None
    wall = time.monotonic_ns() - start[1]
    return round((time.thread_time_ns() - start[0]) / wall, 3) if wall > 0 else None
