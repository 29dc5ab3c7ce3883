"""One worker process's share of a run, as the run's outcome and its result list it."""

from __future__ import annotations

from dataclasses import dataclass, field

from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.clock_sync import ClockOffset


@dataclass
class WorkerPart:
    """One worker's share of a run, as the result lists it."""

    index: int
    pid: int | None
    status: str  # ok | interrupted | failed | lost (died or fell silent: its measurements too)
    sent: int = 0
    completed: int = 0
    failed: int = 0
    dispatch_lag: LatencyHistogram = field(default_factory=LatencyHistogram)
    loop_lag: LatencyHistogram = field(default_factory=LatencyHistogram)
    failure: str | None = None
    where: dict = field(default_factory=dict)
    clock: ClockOffset | None = None  # at t0 (None on this host: one clock)
    clock_after: ClockOffset | None = None  # measured again after the run: the drift
