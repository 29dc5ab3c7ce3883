"""Documents about several runs: ``repeat.json`` (replicates), ``sweep.json`` (a curve of points)
and a gate's judgement (SLA and regression checks)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from loadtest.core.json_types import JsonObject, JsonValue
from loadtest.results.model.base import (
    REPEAT_SCHEMA,
    SWEEP_SCHEMA,
    RunStatus,
    SweepStatus,
    VerdictName,
    _Doc,
)
from loadtest.results.model.judged import Check, Verdict
from loadtest.results.model.run import RunMetrics


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

    x: JsonValue
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
    usd_per_million_output_tokens: float | None = None  # the cost estimate, where priced
    sla: str | None = None  # the point's SLA verdict (PASS, FAIL, INCONCLUSIVE), where set


class SweepPoint(_Doc):
    """One point of a sweep: its parameters, status and run."""

    params: JsonObject
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
    axes: dict[str, list[JsonValue]]
    points: list[SweepPoint]
    axis: str
    curve: list[CurvePoint]
    frontier: list[JsonValue]
    knee: JsonValue = None
    knee_caveats: list[str] = Field(default_factory=list)
    max_rate: MaxRate | None = None
    point_sizing: str | None = None  # how offline points were sized, when not by the scenario
    cheapest: Cheapest | None = None  # where the points are priced


class Cheapest(_Doc):
    """The priced point of lowest cost per million output tokens among those that meet the SLA
    (valid, steady, its verdict PASS), or among the valid steady ones where no SLA is set."""

    x: JsonValue
    usd_per_million_output_tokens: float
    among: str  # which points were compared


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
    # the smallest change these runs resolve at the confidence (%): a regression under it
    # cannot FAIL, and a PASS needs it under the minimum effect
    detectable_pct: float | None = None
    # the ratio's ends with each side's own client lateness taken off or left in (> 1 worse)
    client_free_lo: float | None = None
    client_free_hi: float | None = None
    client_could_change: bool = False
    undecided: Literal["noise", "client", "not_measured"] | None = None


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
    verdict_reasons: list[str] = Field(default_factory=list)  # what the verdict rests on
