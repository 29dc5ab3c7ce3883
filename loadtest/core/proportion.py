"""A proportion's interval: how sure a share of successes in ``n`` trials is."""

from __future__ import annotations

import math
from statistics import NormalDist


def wilson(successes: int, n: int, confidence: float) -> tuple[float, float]:
    """The Wilson score interval of ``successes / n``, two-sided at ``confidence`` (it stays
    inside 0..1 and keeps its coverage near 0 and 1, where the normal approximation does not)."""
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # it holds p itself, whatever the rounding (all successes: an upper end of exactly 1)
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))
