"""The typed result documents: ``metrics.json``, ``repeat.json``, ``sweep.json`` and a gate's verdict.

Every document is written with ``model_dump_json`` and read back with ``model_validate_json``
(``read_run``), so a file that does not fit is refused with the field that does not, never
half-read. ``schema`` names the document and its major version; a file of another version gets
a clear message instead of a misreading. Sections that describe the outside world in its own
terms (the scenario, the environment, the backend's facts, GPU telemetry, the profile and the
roofline) stay open mappings; everything loadtest computes is typed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loadtest.core import outside

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


class _Doc(BaseModel):
    """Strict on read: a misspelt or foreign field is an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)

    def view(self) -> dict[str, Any]:
        """The JSON-shaped mapping, as written: what templates and ad-hoc readers walk."""
        return self.model_dump(mode="json", by_alias=True)


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


class Requests(_Doc):
    """How many requests were planned, sent, completed, failed (by type), and their tokens."""

    planned: int | None = None
    sent: int = 0
    never_sent: int | None = None
    completed: int = 0
    failed: int = 0
    warmup: int | None = None
    cancelled: int | None = None
    errors_by_type: dict[str, int] = Field(default_factory=dict)
    under_two_tokens: int | None = None
    output_tokens: int | None = None
    input_tokens: int | None = None
    profiled: int | None = None


class Window(_Doc):
    """The measured window, in seconds from t0 (the plan's origin)."""

    start_s: float | None
    end_s: float | None
    length_s: float | None
    run_s: float
    # t0 itself on the run's clock: CLOCK_MONOTONIC in a real run, the clock every process on the
    # host shares, so a server's own stamps there join with the requests' times from t0
    t0_clock_ns: int | None = None


class Throughput(_Doc):
    """Rates over the measured window (tokens or requests inside it / its length)."""

    requests_per_s: float | None
    output_tokens_per_s: float | None
    total_tokens_per_s: float | None
    output_tokens_in_window: int
    window_s: float | None


class Harness(_Doc):
    """The client's own health: event-loop lag, requests the limiter held back, why it stopped."""

    loop_lag_ms: LatencySummary
    throttled_requests: int
    failure: str | None


class WorkerClock(_Doc):
    """A worker on another host: its monotonic clock against the coordinator's, measured by
    round trips before t0 (it ran on the coordinator's timeline through this offset) and again
    after the run."""

    method: str  # udp | ray: whose round trips
    offset_ms: float  # its clock minus the coordinator's
    uncertainty_ms: float  # the true offset is within this of offset_ms (half the best trip)
    drift_ms: float | None = None  # the offset after the run minus before (None: not measured)
    drift_uncertainty_ms: float | None = None


class WorkerStats(_Doc):
    """One client worker's share of a run (a process here or a Ray actor): what it sent and
    how late."""

    index: int
    pid: int | None
    status: str  # ok | interrupted | failed | lost (died or fell silent: its measurements too)
    sent: int
    completed: int
    failed: int
    dispatch_lag_ms: LatencySummary
    loop_lag_ms: LatencySummary
    valid: bool  # kept up with its share of the schedule
    reasons: list[str] = Field(default_factory=list)
    failure: str | None = None
    host: str | None = None  # a Ray actor's node: host name, IP and node id
    ip: str | None = None
    node: str | None = None
    clock: WorkerClock | None = None  # None: on this host, one clock


class Validity(_Doc):
    """Whether the numbers can be trusted, why not, and what to be careful of."""

    valid: bool
    reasons: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


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


class GoodputResult(_Doc):
    """How many finished requests met every per-request objective, and how many a second."""

    slo_ms: dict[str, float]  # the objectives set: ttft, tpot, e2e
    judged: int  # measured requests that finished (failures count, and are never good)
    good: int
    attainment: float | None  # good / judged
    good_requests_per_s: float | None  # good completions inside the window / window length


class TurnStats(_Doc):
    """One turn position of multi-turn sessions (1 = the first; the last row holds the rest)."""

    turn: str  # "1", "2", ... and "16+" for every turn from there on
    requests: int
    input_tokens_mean: float | None  # the whole prompt: history and the new message
    ttft_ms: LatencySummary


class SessionsResult(_Doc):
    """Multi-turn sessions: how many ran to their end, and TTFT by turn."""

    started: int
    completed: int  # every planned turn answered
    ended_by_failure: int  # a failed turn ends its session
    cut_at_window_end: int  # a next turn fell after the window's end, so was not sent
    turns_sent: int
    history: str  # what earlier replies in a turn's history are: the server's, or stand-ins
    stand_in_replies: int
    ttft_first_turn_ms: LatencySummary
    ttft_later_turns_ms: LatencySummary
    per_turn: list[TurnStats]


class IntervalPoint(_Doc):
    """One reporting interval: counts, p50/p99 of the interval metrics, encoded histograms."""

    model_config = ConfigDict(
        extra="allow", populate_by_name=True
    )  # <metric>_p50_ms / _p99_ms per interval metric

    index: int
    t_s: float
    completed: int
    failed: int
    output_tokens_per_s: float
    histograms: dict[str, str] = Field(default_factory=dict)

    def figure(self, name: str) -> float | None:
        """A field or one of the interval's ``<metric>_p50_ms`` / ``_p99_ms`` figures."""
        if name in type(self).model_fields:
            return getattr(self, name)
        return (self.model_extra or {}).get(name)


class Timeseries(_Doc):
    """The run in reporting intervals (for plots and the regression bootstrap)."""

    interval_s: float
    points: list[IntervalPoint]


class RunMetrics(_Doc):
    """``metrics.json``: one run, whatever its status. A run that never started has only the
    identity, the environment, ``requests`` and ``validity`` (with the reason); the measured
    sections are null."""

    schema_: str = Field(RUN_SCHEMA, alias="schema")
    status: RunStatus
    interrupted_by: str | None = None
    name: str
    started_at: str
    scenario_file: str
    scenario: dict[str, Any]
    environment: dict[str, Any]
    backend: dict[str, Any]
    requests: Requests
    window: Window | None = None
    latency_ms: dict[str, LatencySummary] | None = None
    throughput: Throughput | None = None
    harness: Harness | None = None
    validity: Validity
    stability: Stability | None = None
    goodput: GoodputResult | None = None
    sessions: SessionsResult | None = None
    workers: list[WorkerStats] | None = None  # load.workers > 1: each client process
    timeseries: Timeseries | None = None
    histograms: dict[str, str] | None = None
    histograms_over_range: dict[str, int] | None = None
    loop_lag_histogram: str | None = None
    definitions: dict[str, str] | None = None
    # Flat headline keys for scripts (end-to-end percentiles).
    output_tokens_per_s: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    peak_mem_mb: float | None = None
    commit: str | None = None
    gpu: dict[str, Any] | None = None
    server: dict[str, Any] | None = None  # the server's own /metrics, where it has them
    profile: dict[str, Any] | None = None
    roofline: dict[str, Any] | None = None
    sla: Verdict | None = None

    @property
    def measured(self) -> bool:
        """Whether the run measured anything (a run that failed to start did not)."""
        return self.histograms is not None

    def headline(self, name: str) -> float | None:
        """One of ``HEADLINE``'s metrics, or None where the run has no such figure."""
        section, key, *pct = HEADLINE[name]
        part = getattr(self, section)
        if part is None:
            return None
        if pct:
            summary = part.get(key)
            return None if summary is None else getattr(summary, pct[0])
        return getattr(part, key)


class RepeatStat(_Doc):
    """A headline metric over replicates: median, range, and spread ((max - min) / median)."""

    n: int
    median: float | None = None
    min: float | None = None
    max: float | None = None
    spread_pct: float | None = None
    values: list[float] = Field(default_factory=list)


class RepeatDoc(_Doc):
    """``repeat.json``: a set of replicate runs of one scenario, differing only in the schedule seed."""

    schema_: str = Field(REPEAT_SCHEMA, alias="schema")
    name: str
    scenario_file: str
    status: RunStatus
    repeats: int
    runs: list[str]
    schedule_seeds: list[int]
    summary: dict[str, RepeatStat]
    reasons: list[str]
    sla: Verdict | None


class CurvePoint(_Doc):
    """A sweep point's headline figures, for curves and the knee."""

    x: Any
    status: str
    steady: bool | None = None
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    e2e_p99_ms: float | None = None
    goodput_rps: float | None = None  # good requests/s, where the scenario sets goodput


class SweepPoint(_Doc):
    """One point of a sweep: its parameters, status and run."""

    params: dict[str, Any]
    status: str  # a run status, or "oom" / "error"
    reason: str | None
    run_dir: str
    metrics: RunMetrics | None


class MaxRate(_Doc):
    """The max-rate search's answer: the bracket, its tolerance, how the search ended and why."""

    rate: float | None
    first_failing_rate: float | None
    tolerance: float
    verdict: str
    evidence: str


class SweepDoc(_Doc):
    """``sweep.json``: every point with its run, the curve, the frontier and the knee."""

    schema_: str = Field(SWEEP_SCHEMA, alias="schema")
    status: SweepStatus
    scenario_file: str
    axes: dict[str, list[Any]]
    points: list[SweepPoint]
    axis: str
    curve: list[CurvePoint]
    frontier: list[Any]
    knee: Any = None
    knee_caveats: list[str] = Field(default_factory=list)
    max_rate: MaxRate | None = None
    point_sizing: str | None = None  # how offline points were sized, when not by the scenario


class RegressionCheck(_Doc):
    """One metric of a run against its baselines: the figures, their ratio's interval (> 1 is
    worse), the change in percent and the verdict with its reason."""

    name: str
    baseline: float | None
    candidate: float | None
    unit: str
    ratio: float | None
    lo: float | None
    hi: float | None
    verdict: VerdictName
    reason: str
    lower_is_better: bool = True
    change_pct: float | None = None
    change_interval_pct: tuple[float, float] | None = None
    significant: bool | None = None


class Replicates(_Doc):
    """How many runs each side pooled."""

    baseline: int
    candidate: int


class Regression(_Doc):
    """A gate's regression checks against its baselines, and the terms they were judged on."""

    baselines: list[str]
    min_effect: float
    confidence: float
    replicates: Replicates
    checks: list[RegressionCheck]


class GateResult(_Doc):
    """A gate's judgement of a saved run: SLA checks, regression checks, one verdict."""

    status: str
    reasons: list[str]
    checks: list[Check]
    regression: Regression | None = None
    warnings: list[str] = Field(default_factory=list)
    verdict: VerdictName = "INCONCLUSIVE"


class ResultReadError(Exception):
    """A result file that cannot be read as what it claims to be (a usage error)."""


def read_run(path: Path) -> RunMetrics:
    """``metrics.json`` -> RunMetrics; a clear ResultReadError for a foreign, older or broken file."""
    return _read(path, RunMetrics, RUN_SCHEMA)


def read_repeat(path: Path) -> RepeatDoc:
    """``repeat.json`` -> RepeatDoc (or a ResultReadError naming the problem)."""
    return _read(path, RepeatDoc, REPEAT_SCHEMA)


def read_sweep(path: Path) -> SweepDoc:
    """``sweep.json`` -> SweepDoc (or a ResultReadError naming the problem)."""
    return _read(path, SweepDoc, SWEEP_SCHEMA)


def _read(path: Path, model: type[Any], schema: str) -> Any:

    try:
        text = outside.read_text(Path(path))
    except OSError as exc:
        raise ResultReadError(f"{path}: {exc.strerror or exc}") from None
    except outside.OutsideTextError as exc:
        raise ResultReadError(f"{path}:{exc.line}: {exc}") from None
    try:
        head = outside.loads(text)
    except ValueError as exc:  # not JSON, NaN, nested too deeply
        raise ResultReadError(f"{path}: not JSON: {exc}") from None
    found = head.get("schema") if isinstance(head, dict) else None
    if found != schema:
        kind, _, version = schema.rpartition("/")
        if isinstance(found, str) and found.rpartition("/")[0] == kind:
            raise ResultReadError(
                f"{path}: written as {found}; this loadtest reads {version} "
                "(re-run it, or use the loadtest version that wrote it)"
            )
        raise ResultReadError(
            f"{path}: not a loadtest {kind.rpartition('/')[2]} file (schema: {found!r})"
        )
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[:3]
        where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in first)
        raise ResultReadError(f"{path}: not a valid loadtest result: {where}") from None
