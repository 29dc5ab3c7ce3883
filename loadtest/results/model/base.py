"""What every result document shares: schema names and versions, the status and verdict names,
and the strict base model (a misspelt or foreign field is an error, never dropped)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator

from loadtest.core.document import Document
from loadtest.core.histogram import check_encoded

# An HDR histogram as a result holds it (hdrh's encoding, base64): checked as the file is read
# (loadtest's layout, and no more bytes once inflated than that layout holds), so a result
# that would inflate to gigabytes, or allocate another layout's range, is refused by name
EncodedHistogram = Annotated[str, AfterValidator(check_encoded)]

RUN_SCHEMA = "loadtest/metrics/v1"
REPEAT_SCHEMA = "loadtest/repeat/v1"
SWEEP_SCHEMA = "loadtest/sweep/v1"

RunStatus = Literal["ok", "invalid", "interrupted", "failed"]
VerdictName = Literal["PASS", "FAIL", "INCONCLUSIVE"]
# A sweep's status: running (written after every point), then how it ended. A grid: ok (every
# point ok), partial, invalid (none), stopped_at_oom, interrupted. A max-rate search: ok (a
# bracket found), no_rate_meets_sla, no_verdict (the search could not decide), interrupted.
SweepStatus = Literal[
    "running",
    "ok",
    "partial",
    "invalid",
    "stopped_at_oom",
    "interrupted",
    "no_rate_meets_sla",
    "no_verdict",
]

# The headline metrics, defined once: name -> (section, key[, percentile]) of a run result.
# Sweeps' curves, repeat summaries and ``compare`` all read these.
HEADLINE: dict[str, tuple[str, ...]] = {
    "output_tokens_per_s": ("throughput", "output_tokens_per_s"),
    "requests_per_s": ("throughput", "requests_per_s"),
    **{f"{m}_{p}": ("latency_ms", m, p) for m in ("ttft", "itl", "e2e") for p in ("p50", "p99")},
}


class _Doc(Document):
    """A result document or section: strict on read, every field written."""


class LatencySummary(_Doc):
    """One metric's distribution in milliseconds (percentiles from its HDR histogram)."""

    count: int
    mean: float | None = None
    stddev: float | None = None
    min: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    max: float | None = None
    over_range: int = 0
