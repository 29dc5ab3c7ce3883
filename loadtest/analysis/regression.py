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
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from loadtest.analysis.sla import FAIL, INCONCLUSIVE, PASS, ends
from loadtest.core.histogram import LatencyHistogram
from loadtest.core.units import PERCENTILE_NAMES
from loadtest.results.model import RegressionCheck, RunMetrics
from loadtest.results.runset import Evidence, RunSet

DEFAULT_METRICS = (
    "ttft_p50",
    "ttft_p99",
    "itl_p50",
    "itl_p99",
    "e2e_p50",
    "e2e_p99",
    "output_tokens_per_s",
)
INTERVAL_METRICS = ("ttft", "itl", "e2e")  # the latencies kept per interval in metrics.json
# name -> (metric, percentile) for every comparable latency: a lookup, never name parsing.
COMPARABLE = {f"{m}_{p}": (m, pct) for m in INTERVAL_METRICS for p, pct in PERCENTILE_NAMES.items()}


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


def parse_metric(name: str) -> tuple[str, float | None]:
    """``ttft_p99`` -> (``ttft``, 99.0); ``output_tokens_per_s`` -> (that, None)."""
    if name == "output_tokens_per_s":
        return name, None
    parsed = COMPARABLE.get(name)
    if parsed is None:
        raise ValueError(
            f"{name}: not a comparable metric (use {', '.join(DEFAULT_METRICS)}, or a p90/p95/p999)"
        )
    return parsed


class Sample:
    """One side (baseline or candidate): its runs' measurement intervals, in arrays for resampling.

    For each latency metric, every distinct (interval, value) pair of every run is a row:
    values in µs as hdrh reports them (highest equivalent value), sorted by value, with their
    counts and the global interval number. Throughput is the tokens stamped in each interval that
    lies wholly inside its run's measured window.
    """

    def __init__(self, runs: Sequence[RunMetrics]) -> None:
        if not runs:
            raise ValueError("no runs")
        self.n_runs = len(runs)
        self.run_units: list[np.ndarray] = []  # per run: the global interval numbers of its units
        unit_rows: dict[str, list[np.ndarray]] = {m: [] for m in INTERVAL_METRICS}
        tokens: list[float] = []
        widths: list[float] = []
        next_unit = 0
        for metrics in runs:
            ts = metrics.timeseries
            points = ts.points if ts else []
            width = (ts.interval_s if ts else None) or 1.0
            start, end = (
                (metrics.window.start_s, metrics.window.end_s) if metrics.window else (None, None)
            )
            units = []
            for p in points:
                u = next_unit
                next_unit += 1
                units.append(u)
                for m, text in p.histograms.items():
                    if m in unit_rows:
                        values, counts = LatencyHistogram.decode(text).recorded()
                        unit_rows[m].append(
                            np.stack([values, counts, np.full(len(values), u)], axis=1)
                        )
                inside = (
                    start is not None
                    and end is not None
                    and p.t_s >= start - 1e-9
                    and p.t_s + width <= end + 1e-9
                )
                tokens.append(p.output_tokens_per_s * width if inside else math.nan)
                widths.append(width)
            self.run_units.append(np.asarray(units, dtype=np.int64))
        self.n_units = next_unit
        self.tokens = np.asarray(tokens, dtype=float)
        self.tput_width = np.asarray(widths, dtype=float)
        self.rows = {}
        for m, rows in unit_rows.items():
            arr = np.concatenate(rows) if rows else np.zeros((0, 3), dtype=np.int64)
            arr = arr[np.argsort(arr[:, 0], kind="stable")]
            self.rows[m] = (arr[:, 0], arr[:, 1], arr[:, 2])

    # -- statistics for a batch of resamples: ``weights`` is (B, n_units), how often each unit is taken

    def percentile_us(self, metric: str, pct: float, weights: np.ndarray) -> np.ndarray:
        values, counts, unit = self.rows[metric]
        out = np.full(weights.shape[0], np.nan)
        if len(values) == 0:
            return out
        step = max(1, 20_000_000 // len(values))  # bound the (resamples x rows) working set
        for lo in range(0, weights.shape[0], step):
            cum = np.cumsum(weights[lo : lo + step, unit] * counts, axis=1)
            total = cum[:, -1]
            target = np.maximum(
                np.floor(pct * total / 100.0 + 0.5), 1
            )  # hdrh's count at percentile
            idx = np.minimum([np.searchsorted(c, t) for c, t in zip(cum, target)], len(values) - 1)
            out[lo : lo + step] = np.where(total > 0, values[idx], np.nan)
        return out

    def tokens_per_s(self, weights: np.ndarray) -> np.ndarray:
        ok = ~np.isnan(self.tokens)
        if not ok.any():
            return np.full(weights.shape[0], np.nan)
        w = weights[:, ok]
        taken = w.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            rates: np.ndarray = (
                (w * self.tokens[ok]).sum(axis=1)
                / (w * self.tput_width[ok]).sum(axis=1)
                * np.where(taken > 0, 1, np.nan)
            )
        return rates

    def statistic(self, name: str, weights: np.ndarray) -> np.ndarray:
        """The pooled statistic of a metric under resampling weights of the blocks."""
        metric, pct = parse_metric(name)
        if pct is None:
            return self.tokens_per_s(weights)
        return self.percentile_us(metric, pct, weights) / 1000.0  # ms

    # -- resampling

    def identity(self) -> np.ndarray:
        return np.ones((1, self.n_units))

    def resample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` bootstrap weight vectors: moving blocks of intervals, within each run."""
        weights = np.zeros((n, self.n_units))
        for b in range(n):
            for units in self.run_units:
                if len(units):
                    np.add.at(weights[b], units[_block_indices(rng, len(units))], 1)
        return weights

    @property
    def blocks(self) -> int:
        """Independent-ish pieces the within-run bootstrap draws from: its blocks, over all runs."""
        return sum(math.ceil(len(u) / _block_length(len(u))) for u in self.run_units if len(u))

    def log_variance(self, name: str, weights: np.ndarray) -> tuple[float, float]:
        """Variance of the log of the pooled statistic, and its degrees of freedom.

        Within runs, a variance estimated from b blocks has about b - 1 degrees of freedom; the
        between-run term from R replicates has R - 1 (Welch-Satterthwaite combines them).
        """
        with np.errstate(invalid="ignore", divide="ignore"):
            pooled = np.log(self.statistic(name, weights))
        pooled = pooled[np.isfinite(pooled)]
        within = float(np.var(pooled, ddof=1)) if len(pooled) > 1 else math.nan
        dof_within = max(1, self.blocks - 1)
        if self.n_runs < 2:
            return within, dof_within
        per_run, per_run_var = [], []
        for units in self.run_units:
            mask = np.zeros(self.n_units)
            mask[units] = 1
            with np.errstate(invalid="ignore", divide="ignore"):
                own = np.log(self.statistic(name, mask[None, :]))[0]
                boot = np.log(self.statistic(name, weights * mask))
            boot = boot[np.isfinite(boot)]
            if np.isfinite(own) and len(boot) > 1:
                per_run.append(own)
                per_run_var.append(np.var(boot, ddof=1))
        if len(per_run) < 2:
            return within, dof_within
        between = max(0.0, float(np.var(per_run, ddof=1) - np.mean(per_run_var))) / len(
            per_run
        )  # tau^2 / R
        return within + between, _welch_dof([(within, dof_within), (between, len(per_run) - 1)])


def _welch_dof(parts: list[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of independent variance estimates."""
    total = sum(v for v, _ in parts)
    denom = sum(v * v / d for v, d in parts if v > 0)
    return total * total / denom if denom > 0 else math.inf


def _block_length(k: int) -> int:
    return max(1, int(round(float(k) ** (1 / 3))))


def _block_indices(rng: np.random.Generator, k: int) -> np.ndarray:
    """A moving-block bootstrap of ``k`` consecutive intervals, block length about k^(1/3)."""
    length = _block_length(k)
    starts = rng.integers(0, k - length + 1, math.ceil(k / length))
    return (starts[:, None] + np.arange(length)[None, :]).ravel()[:k]


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
    tail = (1 - confidence) / len(metrics)  # Bonferroni
    sides = Sides(_evidence(baseline_runs), _evidence(candidate_runs))
    return [_check(name, base, cand, wb, wc, min_effect, tail, sides) for name in metrics]


@dataclass(frozen=True)
class Sides:
    """Both sides pooled as SLA evidence: what of each figure is its own client's."""

    base: Evidence
    cand: Evidence

    def ratio_ends(self, name: str) -> tuple[float, float] | None:
        """The ratio (> 1 worse) at its least and most once each side's own client lateness
        may be taken off. A stamp delay both runs share moves both alike: only its excess
        counts. None where a side has nothing to read."""
        b, c = self.base, self.cand
        metric, pct = parse_metric(name)
        if pct is None:  # throughput: a late schedule only lowers it
            lost_b, lost_c = (_lost(e) for e in (b, c))
            b0, c0 = b.output_tokens_per_s, c.output_tokens_per_s
            if not b0 or not c0:
                return None
            return b0 * (1 - lost_c) / c0, b0 / max(1e-9, 1 - lost_b) / c0
        hb, hc = b.histograms or {}, c.histograms or {}
        if not hb.get(metric) or not hc.get(metric) or not hb[metric].count or not hc[metric].count:
            return None
        d_b, d_c = b.client.stamp_delay_ms, c.client.stamp_delay_ms
        eb = ends(metric, pct, hb, replace(b.client, stamp_delay_ms=max(0.0, d_b - d_c)))
        ec = ends(metric, pct, hc, replace(c.client, stamp_delay_ms=max(0.0, d_c - d_b)))
        if eb.lo <= 0 or eb.hi <= 0:
            return None
        return ec.lo / eb.hi, ec.hi / eb.lo


def _evidence(runs: Sequence[RunMetrics]) -> Evidence:
    return RunSet(Path("."), list(runs), [str(i) for i in range(len(runs))]).pooled()


def _lost(e: Evidence) -> float:
    """The window's share its latest send cost."""
    if not e.window_s:
        return 0.0
    return min(0.999, e.client.dispatch_max_ms / 1e3 / e.window_s)


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
    z = student_t_quantile(1 - tail, _welch_dof([(vb, dof_b), (vc, dof_c)]))
    sd = math.sqrt(vb + vc)
    spread = math.exp(z * sd)
    lo, hi = ratio / spread, ratio * spread
    ends_ = (sides.ratio_ends(name) if sides else None) or (ratio, ratio)
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


def student_t_quantile(p: float, dof: float) -> float:
    """Student's t quantile (scipy, imported only when a comparison needs it)."""
    from scipy.stats import t as student_t  # lazy: only a gate with baselines needs it

    return float(student_t.ppf(p, dof))


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
