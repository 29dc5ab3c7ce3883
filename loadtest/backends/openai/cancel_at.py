"""A request the plan cancels at a time (``load.cancel.after``): its read cancelled then, on
loadtest's clock, what it read kept."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from loadtest.core.clock import Clock
from loadtest.core.events import Cancelled
from loadtest.workload.requests import PlannedRequest

T = TypeVar("T")


async def until_stop(clock: Clock, req: PlannedRequest, reading: Awaitable[T]) -> T | Cancelled:
    """``reading``'s result, or ``Cancelled`` where the plan cancels the request at a time
    (``req.stop_at_ns``) that comes first: the read is cancelled then, what it read kept."""
    stop_at = req.stop_at_ns
    if stop_at is None:
        return await reading
    task = asyncio.ensure_future(reading)
    fired: list[int] = []
    loop = asyncio.get_running_loop()
    timer: asyncio.TimerHandle | None = None

    def arm() -> None:
        nonlocal timer
        now = clock.now_ns()  # the clock may be offset from the loop's: a delay
        if now < stop_at:  # early: a loop's timer may fire up to 1 ms before its
            # time (uvloop counts whole ms from the start of its turn), so never trust it
            timer = loop.call_later((stop_at - now) / 1e9, arm)
        else:
            fired.append(now)
            task.cancel()

    arm()
    try:
        return await task
    except asyncio.CancelledError:
        if not fired or not task.cancelled():
            raise  # the run's own cancellation (an interrupt, a drain deadline)
        return Cancelled(fired[0])
    finally:
        if timer is not None:
            timer.cancel()
