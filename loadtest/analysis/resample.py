"""One side of a baseline comparison as resamplable data: each run's measurement intervals in
arrays, the pooled statistic of any resample of them, and the moving-block bootstrap that
respects their autocorrelation (``regression`` compares two of these)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from loadtest.analysis import student_t
from loadtest.core.histogram import LatencyHistogram
from loadtest.core.units import PERCENTILE_NAMES
from loadtest.results.model import RunMetrics

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
        return within + between, welch_dof([(within, dof_within), (between, len(per_run) - 1)])


def welch_dof(parts: list[tuple[float, float]]) -> float:
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


def student_t_quantile(p: float, dof: float) -> float:
    """Student's t quantile (the project's own: no scipy in the light install)."""
    return student_t.quantile(p, dof)
