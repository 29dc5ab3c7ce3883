"""The two sides of a baseline comparison as SLA evidence: what of each side's figures is its
own client's, so a regression check can take each side's client lateness off (``sla.ends``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from loadtest.analysis.figure_ends import ends
from loadtest.results.model import RunMetrics
from loadtest.results.runset import Evidence, RunSet


@dataclass(frozen=True)
class Sides:
    """Both sides pooled as SLA evidence: what of each figure is its own client's."""

    base: Evidence
    cand: Evidence

    def ratio_ends(self, metric: str, pct: float | None) -> tuple[float, float] | None:
        """The ratio (> 1 worse) at its least and most once each side's own client lateness
        may be taken off. A stamp delay both runs share moves both alike: only its excess
        counts. ``pct`` None: output tokens/s. None where a side has nothing to read."""
        b, c = self.base, self.cand
        if pct is None:  # throughput: a late schedule only lowers it
            lost_b, lost_c = (_lost(e) for e in (b, c))
            b0, c0 = b.output_tokens_per_s, c.output_tokens_per_s
            if not b0 or not c0:
                return None
            return b0 * (1 - lost_c) / c0, b0 / max(1e-9, 1 - lost_b) / c0
        hb, hc = b.histograms or {}, c.histograms or {}
        if not hb.get(metric) or not hc.get(metric) or not hb[metric].count or not hc[metric].count:
            return None
        # each side's stamp delay at the figure's own rank; what both share moves both alike
        d_b, d_c = b.client.stamp_at(pct), c.client.stamp_at(pct)
        eb = ends(metric, pct, hb, replace(b.client, stamp_delay_ms=max(0.0, d_b - d_c), lag=None))
        ec = ends(metric, pct, hc, replace(c.client, stamp_delay_ms=max(0.0, d_c - d_b), lag=None))
        if eb.lo <= 0 or eb.hi <= 0:
            return None
        return ec.lo / eb.hi, ec.hi / eb.lo


def evidence_of(runs: Sequence[RunMetrics]) -> Evidence:
    """Runs pooled as one side's evidence."""
    return RunSet(Path("."), list(runs), [str(i) for i in range(len(runs))]).pooled()


def _lost(e: Evidence) -> float:
    """The window's share its latest send cost."""
    if not e.window_s:
        return 0.0
    return min(0.999, e.client.dispatch_max_ms / 1e3 / e.window_s)
