"""Student's t distribution's quantile, the project's own, so that the light install needs no
scipy (143 MB for this one function). The CDF is the regularised incomplete beta function,
summed by its continued fraction (Lentz's method, as in Numerical Recipes' ``betacf``); the
quantile is found by bisection on it, to well under the precision an interval needs. Tested
against scipy on a grid of probabilities and degrees of freedom (tests/unit/analysis).
"""

from __future__ import annotations

import math
from statistics import NormalDist

_EPS, _TINY, _ITERATIONS = 1e-15, 1e-300, 500


def quantile(p: float, dof: float) -> float:
    """The ``p`` quantile of Student's t with ``dof`` degrees of freedom (> 0; infinite: the
    normal's)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if dof <= 0 or math.isnan(dof):
        raise ValueError(f"degrees of freedom must be positive, got {dof}")
    if math.isinf(dof) or dof > 1e7:
        return NormalDist().inv_cdf(p)
    if p < 0.5:
        return -quantile(1 - p, dof)
    lo, hi = 0.0, 1.0
    while cdf(hi, dof) < p:  # bracket it: the tail of a t with dof near 0 is very long
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if cdf(mid, dof) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


def cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with ``dof`` degrees of freedom."""
    x = dof / (dof + t * t)
    tail = 0.5 * _beta_regularised(dof / 2, 0.5, x)
    return 1 - tail if t > 0 else tail


def _beta_regularised(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):  # the fraction converges fast on this side
        return front * _fraction(a, b, x) / a
    return 1 - front * _fraction(b, a, 1 - x) / b


def _fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), by the modified Lentz method."""
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _ITERATIONS):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):  # fmt: skip
            d = 1 + aa * d
            d = 1 / (d if abs(d) > _TINY else _TINY)
            c = 1 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1) < _EPS:
            break
    return h
