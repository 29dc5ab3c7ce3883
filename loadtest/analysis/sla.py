"""SLA checks -> a three-valued verdict with reasons: PASS, FAIL or INCONCLUSIVE.

A percentile bound ``metric_pX <= B`` is judged on the saved histogram. FAIL when the observed
percentile is over B. PASS only with evidence: MLPerf's early-stopping rule, i.e. with ``k`` of
``n`` samples over B, the chance of seeing at most ``k`` misses if the true tail fraction were
``1 - X/100`` must be at most ``1 - confidence``. With no misses at 99% confidence a p99 bound
needs 459 samples; fewer is INCONCLUSIVE, never PASS. Error-rate bounds use the same rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from loadtest.config.objectives import Sla
from loadtest.core.histogram import LatencyHistogram
from loadtest.results.model import Check, Verdict
from loadtest.results.runset import Evidence

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"


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


def _check(
    name: str,
    verdict: str,
    observed: float | None,
    bound: float,
    op: str,
    unit: str,
    reason: str,
    samples: int | None = None,
    needed: int | None = None,
) -> Check:
    return Check(
        name=name,
        verdict=verdict,
        observed=observed,
        bound=bound,
        op=op,
        unit=unit,
        reason=reason,
        samples=samples,
        samples_needed=needed,
    )


def percentile_check(
    name: str, hist: LatencyHistogram, pct: float, bound_ms: float, confidence: float
) -> Check:
    """``pct`` of ``hist`` at most ``bound_ms``: FAIL if over, PASS only with enough evidence."""
    n = hist.count
    if n == 0:
        return _check(name, INCONCLUSIVE, None, bound_ms, "<=", "ms", "no samples", 0, None)
    observed = hist.percentile_ms(pct)
    misses = hist.count_above_us(int(bound_ms * 1000))
    tail = 1 - pct / 100
    if observed > bound_ms:
        return _check(
            name,
            FAIL,
            observed,
            bound_ms,
            "<=",
            "ms",
            f"observed {observed:g} ms > {bound_ms:g} ms ({misses} of {n} samples over)",
            n,
        )
    if binom_cdf(misses, n, tail) <= 1 - confidence:
        return _check(
            name,
            PASS,
            observed,
            bound_ms,
            "<=",
            "ms",
            f"{misses} of {n} samples over {bound_ms:g} ms: p{_fmt_pct(pct)} <= bound at {confidence:.0%} confidence",
            n,
        )
    need = samples_needed(misses, tail, confidence)
    return _check(
        name,
        INCONCLUSIVE,
        observed,
        bound_ms,
        "<=",
        "ms",
        f"observed {observed:g} ms is within the bound, but {n} samples with {misses} over are too few "
        f"for {confidence:.0%} confidence (needs >= {need})",
        n,
        need,
    )


def error_rate_check(failed: int, finished: int, bound: float, confidence: float) -> Check:
    """Failed / finished at most ``bound``, with the same evidence rule."""
    if finished == 0:
        return _check("error_rate", INCONCLUSIVE, None, bound, "<=", "", "no finished requests", 0)
    rate = failed / finished
    if rate > bound:
        return _check(
            "error_rate",
            FAIL,
            rate,
            bound,
            "<=",
            "",
            f"{failed} of {finished} requests failed",
            finished,
        )
    if (bound == 0 and failed == 0) or binom_cdf(failed, finished, bound) <= 1 - confidence:
        return _check(
            "error_rate", PASS, rate, bound, "<=", "", f"{failed} of {finished} failed", finished
        )
    need = samples_needed(failed, bound, confidence)
    return _check(
        "error_rate",
        INCONCLUSIVE,
        rate,
        bound,
        "<=",
        "",
        f"{failed} of {finished} failed: too few requests for {confidence:.0%} confidence (needs >= {need})",
        finished,
        need,
    )


def floor_check(name: str, observed: float | None, bound: float, unit: str) -> Check:
    """A throughput at least ``bound`` (a rate is measured, not sampled: no evidence rule)."""
    if observed is None:
        return _check(name, INCONCLUSIVE, None, bound, ">=", unit, "not measured (no window)")
    verdict = PASS if observed >= bound else FAIL
    return _check(name, verdict, observed, bound, ">=", unit, f"observed {observed:.4g} {unit}")


def evaluate(sla: Sla, evidence: Evidence) -> Verdict:
    """Every objective of ``sla`` as a check on ``evidence``, and the overall verdict."""
    confidence = sla.confidence
    checks = []
    if sla.error_rate is not None:
        checks.append(
            error_rate_check(
                evidence.failed, evidence.failed + evidence.completed, sla.error_rate, confidence
            )
        )
    for name, observed, unit in (
        ("output_tokens_per_s", evidence.output_tokens_per_s, "output_tokens/s"),
        ("requests_per_s", evidence.requests_per_s, "requests/s"),
    ):
        bound = getattr(sla, name)
        if bound is not None:
            checks.append(floor_check(name, observed, bound, unit))
    checks += _latency_checks(sla, evidence)
    # a model mix: each model's latencies and errors judged on their own too (a floor on the
    # run's throughput is the run's: the models share it)
    for model, own in evidence.by_model.items():
        mine = []
        if sla.error_rate is not None:
            mine.append(
                error_rate_check(own.failed, own.failed + own.completed, sla.error_rate, confidence)
            )
        mine += _latency_checks(sla, replace(own, steady=evidence.steady, status=evidence.status))
        checks += [c.model_copy(update={"name": f"{c.name} [{model}]"}) for c in mine]
    return Verdict(verdict=overall(checks, evidence.status), checks=checks)


def _latency_checks(sla: Sla, evidence: Evidence) -> list[Check]:
    """Each latency bound of ``sla`` judged on ``evidence``'s histograms."""
    confidence, checks = sla.confidence, []
    for name, metric, pct, bound_ns in sla.latency_bounds():
        hist = (evidence.histograms or {}).get(metric, LatencyHistogram())
        check = percentile_check(name, hist, pct, bound_ns / 1e6, confidence)
        if evidence.steady is False and check.verdict == PASS:
            # A backlog that grows for the whole run: a longer run would show higher latencies.
            check = check.model_copy(
                update={
                    "verdict": INCONCLUSIVE,
                    "reason": "the run was overloaded (not steady): its latencies grow with the "
                    f"run's length, so a pass now says nothing ({check.reason})",
                }
            )
        checks.append(check)
    return checks


def overall(checks: Iterable[Check | str], status: str = "ok") -> str:
    """FAIL if any check failed; else INCONCLUSIVE if any was, or the run is not ok; else PASS.
    ``checks``: Check objects or verdict strings."""
    verdicts = {c if isinstance(c, str) else c.verdict for c in checks}
    if FAIL in verdicts:
        return FAIL
    if INCONCLUSIVE in verdicts or status != "ok":
        return INCONCLUSIVE
    return PASS


def _fmt_pct(p: float) -> str:
    return f"{p:g}"
