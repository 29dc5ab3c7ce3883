"""``load.max_rate``: a ceiling on sends per second over any arrival process, on loadtest's clock.

A token bucket in its GCRA form (one "theoretical arrival time", integer ns): on average at most
``rate`` sends a second, in bursts of at most ``max(1, floor(rate))``; a fractional rate is
honoured exactly (0.5/s: one send every 2 s). It reads the injected clock, so it runs on the
virtual clock like everything else (asyncio-throttle read ``time.monotonic()`` itself and
counted whole requests per period, which made 0.5/s into 1/s).
"""

from __future__ import annotations

import math

from loadtest.core.clock import NS_PER_S, Clock


class RateCeiling:
    """``load.max_rate``: a ceiling on sends per second over any arrival process (GCRA, on the run's clock)."""

    def __init__(self, rate_per_s: float, clock: Clock) -> None:
        self.clock = clock
        self.interval_ns = round(NS_PER_S / rate_per_s)
        burst = max(1, math.floor(rate_per_s))
        self.tolerance_ns = (burst - 1) * self.interval_ns
        self._tat: int | None = None  # when the bucket would be empty again
        self.held = 0  # sends the ceiling held back
        self.released_ns = 0  # when it last let a held send go

    async def acquire(self) -> bool:
        """Wait for this send's slot; True when the ceiling held it back."""
        now = self.clock.now_ns()
        tat = now if self._tat is None else max(self._tat, now)
        allowed_at = tat - self.tolerance_ns
        self._tat = tat + self.interval_ns  # reserved before any wait: callers queue in order
        if allowed_at > now:
            await self.clock.sleep_until(allowed_at)
            return True
        return False

    async def throttle(self) -> int:
        """Wait for this send's slot; returns the last time any send was held by the ceiling.

        Requests queued behind a held one reach the front late because of the ceiling, not
        because the harness lagged, so dispatch lag counts from max(intended, that time).
        """
        if await self.acquire():
            self.held += 1
            self.released_ns = self.clock.now_ns()
        return self.released_ns
