"""What a run's figures were judged to be: the SLA's checks and verdict, and whether the load
was carried (stability, with the latency trends behind it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from loadtest.results.model.base import VerdictName, _Doc

# Why a check is INCONCLUSIVE: too few samples for the percentile's claim; the client's own
# measured share (its lateness, its own failures) spans the limit: the figure fails as observed
# and passes with that share taken off; the run did not carry its load (or may not have), so
# its latencies grow with its length; nothing measured to judge.
Undecided = Literal["samples", "client", "unsteady", "not_measured"]


class Check(_Doc):
    """One SLA check: the observed value against its bound, and why this verdict."""

    name: str
    verdict: VerdictName
    observed: float | None
    bound: float
    op: Literal["<=", ">="]
    unit: str
    reason: str
    samples: int | None = None  # the evidence's size (samples or requests)
    samples_needed: int | None = None  # for an INCONCLUSIVE check: how many would decide it
    # the figure with the client's own measured share taken off (latencies: the service-time
    # twin less the stamp delay; ITL and TPOT: the observed less it; a rate: the schedule's
    # shift put back). The server's true figure lies between this and ``observed``.
    client_free: float | None = None
    # whether the client's lateness could have changed this verdict (the two ends disagree)
    client_could_change: bool = False
    undecided: Undecided | None = None  # an INCONCLUSIVE check's cause


class Verdict(_Doc):
    """The SLA's overall verdict, every check behind it, and why it is not PASS."""

    verdict: VerdictName
    checks: list[Check]
    reasons: list[str] = Field(default_factory=list)


class Trend(_Doc):
    """A latency's slope against intended send time over the window, with its 99% interval."""

    slope_ms_per_s: float
    slope_lo: float
    slope_hi: float
    rise_ms: float  # the fitted rise over the whole window
    median_ms: float  # the median of the per-interval medians
    intervals: int
    rising: bool  # significantly and materially rising


class Stability(_Doc):
    """Whether the offered load was carried: steady (shown), overloaded (shown), or None,
    unknown (the evidence is too thin either way; ``reasons`` say why)."""

    steady: bool | None
    reasons: list[str] = Field(default_factory=list)
    open_loop: bool
    offered_rps: float | None  # None for a closed loop: its users wait for their answers
    delivered_rps: float
    delivered_fraction: float | None
    backlog_at_start: int
    backlog_at_end: int
    backlog_growth_per_s: float
    ttft_trend: Trend | None = None
    queue_trend: Trend | None = None
