"""Baseline regression: is a run materially worse than its baseline, beyond measurement noise?

Each check compares one headline statistic (a TTFT/ITL/E2E percentile, or output tokens/s) as a
ratio oriented so that > 1 is worse: candidate/baseline for latency, baseline/candidate for
throughput. Its uncertainty, on the log scale, has two parts:

* within a run: whole measurement intervals are resampled in moving blocks (a block bootstrap,
  stratified by run). Latencies are autocorrelated (a queue that builds up makes consecutive
  requests slow together); resampling single requests as if independent would understate the
  spread and make A/A runs fail;
* between runs, with replicates (``run --repeat``, several ``--baseline`` directories): the
  spread of the per-run figures beyond what their own bootstraps explain (a random-effects
  term, as in a meta-analysis), so run-to-run variation (a warmer GPU, a different allocation)
  widens the interval. Resampling runs themselves is too coarse with three of them.

The interval is normal on the log scale at a Bonferroni-corrected level: with m metrics each
one-sided test runs at (1 - confidence) / m, so an A/A comparison fails any check with chance
under 1 - confidence. With the minimum effect ``d`` (say 5%): FAIL when the regression is real
and material (lo > 1 and the ratio > 1 + d); PASS when any regression is smaller than d
(hi <= 1 + d); otherwise INCONCLUSIVE, with the smallest change the runs resolve (the
interval's half-width as a ratio: a PASS needs it under d).

Each side's own client lateness is kept apart as in the SLA checks (``sla.ends``): FAIL needs
the ratio to fail at its least (the candidate's figure with its client's share taken off, the
baseline's as observed), PASS to pass at its most. A stamp delay both sides share moves both
alike, so only one side's excess over the other's counts.

The percentile of a resample is computed exactly as hdrh computes it on the merged histogram,
so with every interval taken once the point estimate equals the run's reported figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from loadtest.analysis.answer_regression import answers_comparison, counts
from loadtest.analysis.resample import (
    DEFAULT_METRICS,
    INTERVAL_METRICS,
    Sample,
    parse_metric,
    student_t_quantile,
    welch_dof,
)
from loadtest.analysis.sides import Sides, evidence_of
from loadtest.analysis.sla import FAIL, INCONCLUSIVE, PASS
from loadtest.results.model import RegressionCheck, RunMetrics

__all__ = [
    "DEFAULT_METRICS",
    "INTERVAL_METRICS",
    "Comparison",
    "as_checks",
    "compare",
    "parse_metric",
]


@dataclass(frozen=True)
class Comparison:
    """One regression check: baseline and candidate figures, their ratio's interval, the verdict."""

    name: str
    baseline: float | None
    candidate: float | None
    unit: str
    ratio: float | None  # > 1 is worse
    lo: float | None
    hi: float | None
    verdict: str
    reason: str
    lower_is_better: bool = True
    detectable_pct: float | None = None
    client_free_lo: float | None = None  # the ratio at its least and most, client lateness apart
    client_free_hi: float | None = None
    client_could_change: bool = False
    undecided: str | None = None  # an INCONCLUSIVE one's cause: noise, client, not_measured

    @property
    def change_interval_pct(self) -> tuple[float, float] | None:
        """The bootstrap interval of ``change_pct``."""
        if self.lo is None or self.hi is None:
            return None
        if self.lower_is_better:
            return 100.0 * (self.lo - 1), 100.0 * (self.hi - 1)
        return 100.0 * (1 / self.hi - 1), 100.0 * (1 / self.lo - 1)

    @property
    def significant(self) -> bool | None:
        """The interval excludes no change."""
        iv = self.change_interval_pct
        return None if iv is None else (iv[0] > 0 or iv[1] < 0)

    @property
    def change_pct(self) -> float | None:
        """Candidate vs baseline in the metric's own direction (+ = bigger number)."""
        if self.baseline in (None, 0) or self.candidate is None:
            return None
        return 100.0 * (self.candidate / self.baseline - 1)


# arrival kinds whose throughput the server sets: users that wait for their answers, or every
# request at once (offline); any other arrival sends at the rate it was given
SERVER_PACED = ("concurrency", "burst")


def default_metrics(runs: Sequence[RunMetrics]) -> tuple[str, ...]:
    """The headline metrics a gate compares: throughput only where the server set it (a closed
    loop, a burst), not where the offered rate did (an open loop carries what it is offered, or
    is overloaded, which its stability and latencies say)."""
    if all(_arrival_kind(r) in SERVER_PACED for r in runs):
        return DEFAULT_METRICS
    return tuple(m for m in DEFAULT_METRICS if m != "output_tokens_per_s")


def _arrival_kind(run: RunMetrics) -> str | None:
    load = run.scenario.get("load")
    arrival = load.get("arrival") if isinstance(load, dict) else None
    kind = arrival.get("kind") if isinstance(arrival, dict) else None
    return kind if isinstance(kind, str) else None


def compare(
    baseline_runs: Sequence[RunMetrics],
    candidate_runs: Sequence[RunMetrics],
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    min_effect: float = 0.05,
    confidence: float = 0.99,
    resamples: int = 1000,
    seed: int = 0,
) -> list[Comparison]:
    """Each metric of the candidate runs against the baseline runs: a Comparison with its verdict."""
    base, cand = Sample(baseline_runs), Sample(candidate_runs)
    rng = np.random.default_rng(seed)
    wb, wc = base.resample(rng, resamples), cand.resample(rng, resamples)
    answers = counts(baseline_runs) is not None and counts(candidate_runs) is not None
    tail = (1 - confidence) / (len(metrics) + answers)  # Bonferroni
    sides = Sides(evidence_of(baseline_runs), evidence_of(candidate_runs))
    out = [_check(name, base, cand, wb, wc, min_effect, tail, sides) for name in metrics]
    matched = answers_comparison(baseline_runs, candidate_runs, min_effect, tail)
    if matched is not None:  # both sides checked their answers: the match rate's drop too
        out.append(Comparison(**matched))
    return out


def _check(
    name: str,
    base: Sample,
    cand: Sample,
    wb: np.ndarray,
    wc: np.ndarray,
    min_effect: float,
    tail: float,
    sides: Sides | None = None,
) -> Comparison:
    lower_is_better = parse_metric(name)[1] is not None
    unit = "ms" if lower_is_better else "tok/s"
    b0 = float(base.statistic(name, base.identity())[0])
    c0 = float(cand.statistic(name, cand.identity())[0])
    if math.isnan(b0) or math.isnan(c0) or (b0 <= 0 if lower_is_better else c0 <= 0):
        return Comparison(
            name,
            _num(b0),
            _num(c0),
            unit,
            None,
            None,
            None,
            INCONCLUSIVE,
            "not measured in both runs",
            lower_is_better,
            undecided="not_measured",
        )
    ratio = c0 / b0 if lower_is_better else b0 / c0
    vb, dof_b = base.log_variance(name, wb)
    vc, dof_c = cand.log_variance(name, wc)
    if math.isnan(vb) or math.isnan(vc):
        return Comparison(
            name,
            b0,
            c0,
            unit,
            ratio,
            None,
            None,
            INCONCLUSIVE,
            "too few intervals to resample (longer runs)",
            lower_is_better,
            undecided="noise",
        )
    # Student's t on the log scale: the spread is multiplicative, the variance is itself estimated
    # from a few dozen blocks (a normal quantile made A/A fail ~3x too often), and an extreme
    # quantile of a finite set of resamples would be unstable.
    z = student_t_quantile(1 - tail, welch_dof([(vb, dof_b), (vc, dof_c)]))
    sd = math.sqrt(vb + vc)
    spread = math.exp(z * sd)
    lo, hi = ratio / spread, ratio * spread
    ends_ = (sides.ratio_ends(*parse_metric(name)) if sides else None) or (ratio, ratio)
    # the ratio the client's lateness may have moved: its least for FAIL, its most for PASS
    least, most = min(ends_[0], ratio), max(ends_[1], ratio)
    detectable = 100 * (spread - 1)
    level = f"{1 - 2 * tail:.1%}"
    span = (
        f"worse by {100 * (ratio - 1):+.1f}% ({level} interval {100 * (lo - 1):+.1f}% .. "
        f"{100 * (hi - 1):+.1f}%)"
    )
    plain_fail = lo > 1 and ratio > 1 + min_effect
    plain_pass = hi <= 1 + min_effect
    fail = least / spread > 1 and least > 1 + min_effect
    ok = most * spread <= 1 + min_effect
    could_change = plain_fail != fail or plain_pass != ok
    undecided = None
    if fail:
        verdict, why = FAIL, f"{span}: a regression beyond the {min_effect:.0%} minimum effect"
        if least < ratio:
            why += f", still {100 * (least - 1):+.1f}% with the client's own lateness taken off"
    elif ok:
        verdict, why = PASS, f"{span}: any regression is under {min_effect:.0%}"
    elif plain_fail or plain_pass:
        verdict, undecided = INCONCLUSIVE, "client"
        why = (
            f"{span}: decided as observed, but with each run's own client lateness taken off "
            f"the change lies anywhere in {100 * (least - 1):+.1f}% .. {100 * (most - 1):+.1f}%: "
            "the clients' lateness spans the minimum effect"
        )
    else:
        verdict, undecided = INCONCLUSIVE, "noise"
        why = (
            f"{span}: cannot rule out a {min_effect:.0%} regression: these runs resolve changes "
            f"of {detectable:.1f}% at this confidence"
            + (
                ", more than the minimum effect (longer runs or more replicates: --repeat; "
                "or a larger --min-effect)"
                if detectable > 100 * min_effect
                else " (the change itself is near the minimum effect)"
            )
        )
    return Comparison(
        name,
        b0,
        c0,
        unit,
        ratio,
        lo,
        hi,
        verdict,
        why,
        lower_is_better,
        detectable_pct=detectable,
        client_free_lo=least,
        client_free_hi=most,
        client_could_change=could_change,
        undecided=undecided,
    )


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


def as_checks(comparisons: list[Comparison]) -> list[RegressionCheck]:
    """Comparisons as the typed checks gate results hold."""
    return [
        RegressionCheck(
            **asdict(c),
            change_pct=c.change_pct,
            change_interval_pct=c.change_interval_pct,
            significant=c.significant,
        )
        for c in comparisons
    ]
