"""The change in cost between two runs (or repeats): each side's estimated cost per million
output tokens (its ``cost`` section: its own prices at its own measured throughput; the median
over a repeat's replicates), and the change from A to B."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from loadtest.results.model import RunMetrics


@dataclass(frozen=True)
class CostChange:
    a_usd_per_million_output_tokens: float
    b_usd_per_million_output_tokens: float

    @property
    def change_pct(self) -> float:
        return 100.0 * (
            self.b_usd_per_million_output_tokens / self.a_usd_per_million_output_tokens - 1
        )

    def line(self) -> str:
        """One sentence for the terminal and the summaries."""
        return (
            f"cost per million output tokens (estimate): ${self.a_usd_per_million_output_tokens:.4g}"
            f" -> ${self.b_usd_per_million_output_tokens:.4g} ({self.change_pct:+.1f}%), each "
            "run's prices at its measured throughput"
        )

    def view(self) -> dict[str, float]:
        return {
            "a_usd_per_million_output_tokens": self.a_usd_per_million_output_tokens,
            "b_usd_per_million_output_tokens": self.b_usd_per_million_output_tokens,
            "change_pct": round(self.change_pct, 3),
        }


def cost_change(a: Sequence[RunMetrics], b: Sequence[RunMetrics]) -> CostChange | None:
    """None unless both sides are priced (and carried output tokens)."""
    sides = [_median_cost(runs) for runs in (a, b)]
    if sides[0] is None or sides[1] is None:
        return None
    return CostChange(sides[0], sides[1])


def _median_cost(runs: Sequence[RunMetrics]) -> float | None:
    costs = [
        r.cost.usd_per_million_output_tokens
        for r in runs
        if r.cost is not None and r.cost.usd_per_million_output_tokens
    ]
    return statistics.median(costs) if costs else None
