"""What a running point shows while it runs: its counts, the live percentiles of the last few
seconds, and the GPUs' activity. Polled a few times a second by the progress display, and sent
by each worker process in its heartbeat (with its live histograms, encoded, for pooling). For a
metrics endpoint, the measured requests so far (``LiveTotals``): read when it is scraped,
with the event loop's lag (``loop_lag``) and an open loop's backlog."""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field

from loadtest.core.histogram import LatencyHistogram
from loadtest.workload.plan import Plan

LIVE_METRICS = ("ttft", "itl", "e2e")  # e2e: the live figure of answers with no stream
TOTAL_METRICS = ("ttft", "itl", "tpot", "e2e", "dispatch_lag")  # a metrics endpoint's histograms


@dataclass(frozen=True)
class LiveWants:
    """What a heartbeat carries beyond the counts: each costs the worker's loop."""

    percentiles: bool = False  # the live histograms, for a display
    totals: bool = False  # the measured requests so far, for a metrics endpoint


@dataclass
class LiveTotals:
    """The measured requests so far (warm-up and profiled ones left out, as in metrics.json):
    their counts, tokens, failures by type and whole-run histograms to date. Summed over
    workers by ``add``."""

    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    input_tokens: int = 0
    failed_by_type: dict[str, int] = field(default_factory=dict)
    histograms: dict[str, LatencyHistogram] = field(
        default_factory=lambda: {m: LatencyHistogram() for m in TOTAL_METRICS}
    )
    # an open loop's backlog: requests intended by now and not done (sent or not; warm-up
    # too), as the stability verdict counts it; None in a closed loop (its users wait)
    backlog: int | None = None

    def add(self, other: LiveTotals) -> None:
        self.completed += other.completed
        self.failed += other.failed
        self.output_tokens += other.output_tokens
        self.input_tokens += other.input_tokens
        for kind, n in other.failed_by_type.items():
            self.failed_by_type[kind] = self.failed_by_type.get(kind, 0) + n
        for metric, h in other.histograms.items():
            self.histograms.setdefault(metric, LatencyHistogram()).add(h)
        if other.backlog is not None:
            self.backlog = (self.backlog or 0) + other.backlog


class OpenLoopDue:
    """An open loop's requests due by a time from t0 (a live backlog's count): its sends from
    t0, sorted once, on first use; None for a closed loop or multi-turn sessions."""

    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self._offsets: array[int] | None = None

    def by(self, elapsed_ns: int) -> int | None:
        if self._offsets is None:
            reqs = self._plan.requests
            open_loop = not self._plan.multi_turn and all(r.offset_ns is not None for r in reqs)
            self._offsets = array("q", sorted(r.offset_ns or 0 for r in reqs) if open_loop else ())
        return bisect_right(self._offsets, elapsed_ns) if self._offsets else None


@dataclass(frozen=True)
class LivePercentiles:
    """TTFT, ITL and E2E p50/p99 over the open intervals, ms (None where none was recorded)."""

    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p99_ms: float | None = None

    @classmethod
    def of(cls, histograms: Mapping[str, LatencyHistogram]) -> LivePercentiles:
        figures: dict[str, float | None] = {}
        for metric in LIVE_METRICS:
            h = histograms.get(metric)
            p50, p99 = h.percentiles_ms((50, 99)) if h is not None and h.count else (None, None)
            figures[f"{metric}_p50_ms"], figures[f"{metric}_p99_ms"] = p50, p99
        return cls(**figures)


@dataclass(frozen=True)
class LiveStats:
    """A point's progress so far (seconds from t0; counts of measured and warm-up requests)."""

    elapsed_s: float = 0.0
    window_end_s: float | None = None  # a timed run's window end
    planned: int | None = None  # a counted run's requests
    sent: int = 0
    in_flight: int = 0
    completed: int = 0
    failed: int = 0
    latency: LivePercentiles = field(default_factory=LivePercentiles)
    gpu_util_pct: list[float] | None = None  # each device's latest kernel-active share
    # a worker's heartbeat: its live histograms, encoded, for the coordinator to pool
    histograms: dict[str, str] | None = None
    totals: LiveTotals | None = None  # asked for by a metrics endpoint (LiveWants.totals)
