"""How long a run must be for its verdicts to decide, said before it runs.

For each SLA check: how many samples its claim needs at the SLA's confidence (MLPerf's early
stopping: a p99 with none over needs 459), how many if the server is comfortably within it (half
the allowed share over: the misses a good server still has), and how many the scenario's plan
gives in its window (open loops: counted from the plan itself; ITL from the planned output
lengths, so at most that where answers may end early). For a gate against a baseline: the
smallest change a candidate of the baseline's shape can resolve, from the baseline's own
measured noise (the same bootstrap the gate uses, both sides taken as equally noisy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadtest.analysis.early_stopping import enough, samples_needed
from loadtest.config.objectives import Sla
from loadtest.core.units import figure

if TYPE_CHECKING:  # validate's hint needs neither: the detectable change (numpy) is lazy
    from loadtest.results.model import RunMetrics
    from loadtest.workload.plan import Plan

# what one completed request gives each latency metric: a sample, or its gaps (ITL)
PER_REQUEST = {"itl": "gaps"}


@dataclass(frozen=True)
class CheckNeed:
    """One SLA check's evidence: what it needs, and what the scenario's window plans."""

    name: str
    samples: str  # what a sample is: requests, or gaps between tokens
    clean: int  # samples needed with none over the limit
    typical: int  # needed when half the allowed share is over (a server within it)
    planned: int | None  # what the window plans (None: a closed loop, set by the server)
    per_s: float | None  # planned samples a second of window
    most_over: int | None  # misses the planned samples can hold and still decide

    @property
    def decides(self) -> bool | None:
        """Whether the planned window holds enough samples for a clean PASS."""
        return None if self.planned is None else self.planned >= self.clean

    def window_s(self, samples: int) -> float | None:
        return None if not self.per_s else samples / self.per_s

    def line(self) -> str:
        over = "failed" if self.name == "error_rate" else "over the limit"
        need = (
            f"needs >= {self.clean:,} {self.samples} with none {over}, "
            f">= {self.typical:,} where half the allowed share is"
        )
        if self.planned is None:
            return f"{self.name}: {need}; a closed loop: set load.requests to at least that"
        plans = f"this window plans {self.planned:,}"
        longer = self.window_s(self.typical)
        window = f": >= {figure(longer, 's')} of measured window" if longer else ""
        if not self.decides:
            return f"{self.name}: {need}; {plans}: too few, INCONCLUSIVE at best{window}"
        said = f"{self.name}: {need}; {plans}: decides with up to {self.most_over} {over}"
        if self.planned < self.typical:
            said += f" (more may need more{window})"
        return said


def sla_needs(sla: Sla, plan: Plan, replicates: int = 1) -> list[CheckNeed]:
    """Each check of ``sla`` against what ``plan``'s measured window holds, pooled over
    ``replicates`` runs (``run --repeat``: a gate judges them as one)."""
    counts = {k: n * replicates for k, n in planned_samples(plan).items()}
    window_s = window_seconds(plan)
    window_s = None if window_s is None else window_s * replicates
    needs = []
    for name, metric, pct, _ in sla.latency_bounds():
        kind = PER_REQUEST.get(metric, "requests")
        needs.append(_need(name, kind, 1 - pct / 100, sla.confidence, counts.get(kind), window_s))
    if sla.error_rate:  # a rate of 0 is judged by its first failure: no count to plan
        needs.append(
            _need(
                "error_rate",
                "requests",
                sla.error_rate,
                sla.confidence,
                counts.get("requests"),
                window_s,
            )
        )
    return needs


def _need(
    name: str,
    kind: str,
    tail: float,
    confidence: float,
    planned: int | None,
    window_s: float | None,
) -> CheckNeed:
    clean = samples_needed(0, tail, confidence)
    most_over = None
    if planned is not None and planned >= clean:
        most_over = 0
        while enough(most_over + 1, planned, tail, confidence):
            most_over += 1
    return CheckNeed(
        name=name,
        samples=kind,
        clean=clean,
        typical=_typical(tail, confidence, clean),
        planned=planned,
        per_s=planned / window_s if planned is not None and window_s else None,
        most_over=most_over,
    )


def _typical(tail: float, confidence: float, clean: int) -> int:
    """Fewest samples that pass when half the allowed share of them is over the limit."""
    n = clean
    while not enough(math.floor(n * tail / 2), n, tail, confidence):
        n += max(1, n // 200)  # within half a per cent of the least: a plan, not a proof
    return n


def planned_samples(plan: Plan) -> dict[str, int]:
    """Measured requests in an open loop's window, and their most gaps between tokens."""
    if plan.closed_loop is not None:
        return {}
    measured = [r for r in plan.requests if not r.warmup]
    return {
        "requests": len(measured),
        "gaps": sum(max(0, r.output_tokens - 1) for r in measured),
    }


def window_seconds(plan: Plan) -> float | None:
    if plan.window_start_ns is None or plan.window_end_ns is None:
        return None
    return (plan.window_end_ns - plan.window_start_ns) / 1e9


def detectable_pct(
    baseline: Sequence[RunMetrics],
    metrics: Sequence[str],
    confidence: float,
    resamples: int = 400,
) -> dict[str, float | None]:
    """For each metric, the smallest change (%) a candidate as long and as replicated as the
    baseline, and as noisy, could resolve against it at the gate's Bonferroni-corrected level."""
    import numpy as np

    from loadtest.analysis.resample import Sample, student_t_quantile, welch_dof

    sample = Sample(baseline)
    weights = sample.resample(np.random.default_rng(0), resamples)
    tail = (1 - confidence) / len(metrics)
    out: dict[str, float | None] = {}
    for name in metrics:
        variance, dof = sample.log_variance(name, weights)
        if math.isnan(variance):
            out[name] = None
            continue
        z = student_t_quantile(1 - tail, welch_dof([(variance, dof), (variance, dof)]))
        out[name] = 100 * (math.exp(z * math.sqrt(2 * variance)) - 1)
    return out
