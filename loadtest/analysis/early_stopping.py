"""MLPerf's early-stopping rule: whether ``k`` of ``n`` samples over a bound still claim a
percentile at a confidence, and how many samples a claim needs (a p99 at 99% with none over:
459). The SLA checks and run-length planning share it."""

from __future__ import annotations

import math


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (exact enough for any n we see)."""
    if p <= 0:
        return 1.0
    if p >= 1:
        return 1.0 if k >= n else 0.0
    lp, lq = math.log(p), math.log1p(-p)
    log_n_fact = math.lgamma(n + 1)
    total = 0.0
    for i in range(0, min(k, n) + 1):
        total += math.exp(
            log_n_fact - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
        )
    return min(1.0, total)


def samples_needed(misses: int, tail: float, confidence: float) -> int:
    """Fewest samples for which ``misses`` misses still pass the early-stopping test."""
    n = max(misses + 1, 1)
    step = 1
    while binom_cdf(misses, n, tail) > 1 - confidence:  # gallop, then bisect
        n += step
        step *= 2
    lo, hi = max(misses + 1, n - step // 2), n
    while lo < hi:
        mid = (lo + hi) // 2
        if binom_cdf(misses, mid, tail) <= 1 - confidence:
            hi = mid
        else:
            lo = mid + 1
    return lo


def enough(misses: int, n: int, tail: float, confidence: float) -> bool:
    """The early-stopping rule: ``misses`` of ``n`` over the bound still claim the percentile."""
    return binom_cdf(misses, n, tail) <= 1 - confidence
