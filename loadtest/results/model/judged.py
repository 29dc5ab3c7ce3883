"""What a run's figures were judged to be: the SLA's checks and verdict, and whether the load
was carried (stability, with the latency trends behind it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from loadtest.results.model.base import VerdictName, _Doc


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


class Verdict(_Doc):
    """The SLA's overall verdict and every check behind it."""

    verdict: VerdictName
    checks: list[Check]


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
    """Whether the offered load was carried (steady), and the evidence either way."""

    steady: bool
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
