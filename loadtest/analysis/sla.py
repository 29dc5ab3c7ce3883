"""SLA checks -> a three-valued verdict with reasons: PASS, FAIL or INCONCLUSIVE.

A percentile bound ``metric_pX <= B`` is judged on the saved histogram. FAIL when the observed
percentile is over B. PASS only with evidence: MLPerf's early-stopping rule, i.e. with ``k`` of
``n`` samples over B, the chance of seeing at most ``k`` misses if the true tail fraction were
``1 - X/100`` must be at most ``1 - confidence``. With no misses at 99% confidence a p99 bound
needs 459 samples; fewer is INCONCLUSIVE, never PASS. Error-rate bounds use the same rule.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from loadtest.core.histogram import LatencyHistogram

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
_LATENCY_KEY = re.compile(r"^(?P<metric>[a-z0-9_]+)_p(?P<pct>50|90|95|99|999)$")


@dataclass(frozen=True)
class Check:
    name: str
    verdict: str
    observed: float | None
    bound: float
    op: str  # "<=" or ">="
    unit: str
    reason: str


def percentile_key(key: str) -> tuple[str, float] | None:
    """``ttft_p99`` -> (``ttft``, 99.0); ``e2e_p999`` -> (``e2e``, 99.9); None for other keys."""
    match = _LATENCY_KEY.match(key)
    if not match:
        return None
    return match["metric"], 99.9 if match["pct"] == "999" else float(match["pct"])


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


def percentile_check(
    name: str, hist: LatencyHistogram, pct: float, bound_ms: float, confidence: float
) -> Check:
    n = hist.count
    if n == 0:
        return Check(name, INCONCLUSIVE, None, bound_ms, "<=", "ms", "no samples")
    observed = hist.percentile_ms(pct)
    misses = hist.count_above_us(int(bound_ms * 1000))
    tail = 1 - pct / 100
    if observed > bound_ms:
        return Check(
            name,
            FAIL,
            observed,
            bound_ms,
            "<=",
            "ms",
            f"observed {observed:g} ms > {bound_ms:g} ms ({misses} of {n} samples over)",
        )
    if binom_cdf(misses, n, tail) <= 1 - confidence:
        return Check(
            name,
            PASS,
            observed,
            bound_ms,
            "<=",
            "ms",
            f"{misses} of {n} samples over {bound_ms:g} ms: p{_fmt_pct(pct)} <= bound at {confidence:.0%} confidence",
        )
    need = samples_needed(misses, tail, confidence)
    return Check(
        name,
        INCONCLUSIVE,
        observed,
        bound_ms,
        "<=",
        "ms",
        f"observed {observed:g} ms is within the bound, but {n} samples with {misses} over are too few "
        f"for {confidence:.0%} confidence (needs >= {need})",
    )


def error_rate_check(failed: int, finished: int, bound: float, confidence: float) -> Check:
    if finished == 0:
        return Check("error_rate", INCONCLUSIVE, None, bound, "<=", "", "no finished requests")
    rate = failed / finished
    if rate > bound:
        return Check(
            "error_rate", FAIL, rate, bound, "<=", "", f"{failed} of {finished} requests failed"
        )
    if (bound == 0 and failed == 0) or binom_cdf(failed, finished, bound) <= 1 - confidence:
        return Check("error_rate", PASS, rate, bound, "<=", "", f"{failed} of {finished} failed")
    need = samples_needed(failed, bound, confidence)
    return Check(
        "error_rate",
        INCONCLUSIVE,
        rate,
        bound,
        "<=",
        "",
        f"{failed} of {finished} failed: too few requests for {confidence:.0%} confidence (needs >= {need})",
    )


def floor_check(name: str, observed: float | None, bound: float, unit: str) -> Check:
    if observed is None:
        return Check(name, INCONCLUSIVE, None, bound, ">=", unit, "not measured (no window)")
    verdict = PASS if observed >= bound else FAIL
    return Check(name, verdict, observed, bound, ">=", unit, f"observed {observed:.4g} {unit}")


def evaluate(sla: dict, metrics: dict) -> dict:
    """``sla``: the scenario's ``sla`` block as saved in metrics.json (durations as strings)."""
    from loadtest.core.units import parse_duration_ns

    confidence = sla.get("confidence", 0.99)
    hists = {
        m: LatencyHistogram.decode(e, metrics["histograms_over_range"].get(m, 0))
        for m, e in metrics["histograms"].items()
    }
    checks = []
    for key, value in sla.items():
        if value is None or key == "confidence":
            continue
        parsed = percentile_key(key)
        if parsed and parsed[0] in hists:
            bound_ms = parse_duration_ns(value) / 1e6
            checks.append(percentile_check(key, hists[parsed[0]], parsed[1], bound_ms, confidence))
        elif key == "error_rate":
            r = metrics["requests"]
            checks.append(
                error_rate_check(
                    r["failed"], r["failed"] + r["completed"], float(value), confidence
                )
            )
        elif key in ("output_tokens_per_s", "requests_per_s"):
            checks.append(
                floor_check(
                    key,
                    metrics["throughput"].get(key),
                    float(value),
                    key.rsplit("_per_s")[0] + "/s",
                )
            )
        else:  # the Sla model admits no other key: never let a check vanish silently
            raise ValueError(f"SLA key {key!r} has no check")
    return {"verdict": overall(checks, metrics["status"]), "checks": [asdict(c) for c in checks]}


def overall(checks, status: str = "ok") -> str:
    """FAIL if any check failed; else INCONCLUSIVE if any was, or the run is not ok; else PASS.
    ``checks``: Check objects or verdict strings (the gate and reports hold verdicts as dicts)."""
    verdicts = {getattr(c, "verdict", c) for c in checks}
    if FAIL in verdicts:
        return FAIL
    if INCONCLUSIVE in verdicts or status != "ok":
        return INCONCLUSIVE
    return PASS


def _fmt_pct(p: float) -> str:
    return f"{p:g}"
