"""``load.max_in_flight``: an open loop's cap on requests in flight, as vLLM's
``--max-concurrency`` and AIPerf's ``--concurrency`` with a rate.

A request due while every slot is taken waits, in the plan's order, for the next one freed. A
slot is stamped free when its request ends (not when the waiter next runs: the loop's delay in
between is the client's lateness, and is counted as such); the time from the plan's send to that
stamp is the request's slot wait, its own figure, and never counted as the client's lateness.
"""

from __future__ import annotations

import asyncio
from collections import deque

from loadtest.core.clock import Clock


class InFlightCap:
    """At most ``slots`` held at once; waiters served first come, first served."""

    def __init__(self, slots: int, clock: Clock) -> None:
        self.slots = slots
        self.clock = clock
        self.waited = 0  # acquisitions that found every slot taken
        # the free slots, each by when it came free (0: never held), oldest first: a caller
        # takes the one free longest, so it waited only if even that one came free after its
        # plan's time
        self._free: deque[int] = deque([0] * slots)
        self._waiters: deque[asyncio.Future[int]] = deque()

    @property
    def held(self) -> int:
        return self.slots - len(self._free)

    async def acquire(self) -> int:
        """A slot; returns when it came free (ns on ``clock``; 0: never held before)."""
        if self._free and not self._waiters:
            return self._free.popleft()
        self.waited += 1
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter  # the releaser handed its slot over
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed over as this waiter was cancelled: pass it on
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """A request ended: its slot goes to the first waiter, or back to the pool, stamped now."""
        now = self.clock.now_ns()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(now)
                return
        self._free.append(now)


def worker_share(slots: int, index: int, count: int) -> int:
    """Worker ``index`` of ``count``'s share of a cap of ``slots``: the shares add up to it."""
    return slots // count + (index < slots % count)
