"""Was the offered load carried? Every run is judged steady or not, with the evidence.

A run over capacity has no steady-state latency: its queue grows for the whole window, and its
percentiles describe a backlog that grows with the run's length, not the system. Three pieces of
evidence, all from the requests' own timestamps:

- **rates**: offered (measured requests whose intended time falls in the window, per second)
  against delivered (completions in the window, per second);
- **backlog**: requests intended before a time and not done by it, at the window's start and
  end; its growth per second is what the system failed to carry;
- **trend**: the slope of TTFT (and queue time, where the backend reports admission) against
  the intended send time, over the window's intervals, with a 99% interval from a
  heteroskedasticity- and autocorrelation-consistent (Newey-West) standard error, so that the
  slow wander of a busy but stable queue is not called a trend.

Three verdicts, each said with its evidence:

- **overloaded** (``steady: false``) when the system fell behind materially (delivered < 95% of
  offered and the backlog grew by more than its noise), or when latency rose significantly and
  materially over the window (the fitted rise is more than half the window's median);
- **steady** (``true``) only when shown: an open loop delivered at least 95% of what was offered
  with its backlog within noise, and no material rise; a closed loop's trend was judged (enough
  intervals) and did not rise;
- **unknown** (``None``) in between: a shortfall the backlog's noise could explain (too few
  requests to tell), or too few intervals to judge a closed loop's trend. An unknown run whose
  delivered rate fell short is treated as possibly overloaded by the SLA checks.

Closed loops cannot build a backlog (each user waits for its answer), so only the trend is
judged there.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

from loadtest.execution.timeline import Timeline
from loadtest.results.model import Stability, Trend

SHORTFALL = 0.05  # delivered below (1 - this) x offered is a shortfall
MATERIAL_RISE = 0.5  # a trend must rise by this fraction of the window's median to matter
Z99 = 2.576  # two-sided 99%
MIN_BINS = 6  # fewer intervals than this: no trend is judged


def judge(
    tl: Timeline,
    window_start: int | None,
    window_end: int | None,
    interval_ns: int,
    open_loop: bool,
) -> Stability | None:
    """The stability verdict for a run's window, or None when there is no window to judge."""
    if window_start is None or window_end is None or window_end <= window_start or not len(tl):
        return None
    span_s = (window_end - window_start) / 1e9
    arrived = sum(
        1 for t, m in zip(tl.intended, tl.measured) if m and window_start <= t < window_end
    )
    delivered = sum(1 for d in tl.done if window_start <= d < window_end)
    backlog_start = _backlog(tl, window_start)
    backlog_end = _backlog(tl, window_end)
    growth = backlog_end - backlog_start
    offered_rps = arrived / span_s if open_loop else None
    delivered_rps = delivered / span_s
    ttft = _trend(tl.intended, tl.first, window_start, window_end, interval_ns)
    queue = _trend(tl.intended, tl.admitted, window_start, window_end, interval_ns)
    reasons, unknown = [], []
    if open_loop and arrived:
        # A stable queue's backlog wanders by about its square root; count growth beyond that.
        noise = 3 * math.sqrt(max(backlog_start, backlog_end) + 1)
        carried = (
            f"delivered {delivered_rps:.3g} of {offered_rps:.3g} req/s offered "
            f"({delivered / arrived:.0%}); the backlog grew from {backlog_start} to {backlog_end} "
            f"requests in the {span_s:.3g} s window"
        )
        if delivered < (1 - SHORTFALL) * arrived:
            if growth > noise:
                reasons.append(carried)
            else:
                unknown.append(
                    f"{carried}, within the {noise:.0f} that chance gives a stable queue of "
                    f"this size: too few requests ({arrived} in the window) to tell a shortfall "
                    "from noise; a longer window would"
                )
    elif open_loop:
        unknown.append("no request was due inside the window")
    for name, trend in (("TTFT", ttft), ("queue time", queue)):
        if trend is not None and trend.rising:
            reasons.append(
                f"{name} rose {trend.rise_ms:.4g} ms over the window "
                f"(slope {trend.slope_ms_per_s:.3g} ms/s, 99% interval "
                f"[{trend.slope_lo:.3g}, {trend.slope_hi:.3g}]; median {trend.median_ms:.4g} ms)"
            )
    if not open_loop and ttft is None and queue is None:
        unknown.append(
            f"fewer than {MIN_BINS} intervals with a first token: too few to judge the latency "
            "trend of a closed loop"
        )
    return Stability(
        steady=False if reasons else (None if unknown else True),
        reasons=reasons or unknown,
        open_loop=open_loop,
        offered_rps=offered_rps,
        delivered_rps=delivered_rps,
        delivered_fraction=(delivered / arrived) if open_loop and arrived else None,
        backlog_at_start=backlog_start,
        backlog_at_end=backlog_end,
        backlog_growth_per_s=growth / span_s,
        ttft_trend=ttft,
        queue_trend=queue,
    )


def _backlog(tl: Timeline, t: int) -> int:
    """Requests intended before ``t`` and not done by it."""
    return sum(1 for i, d in zip(tl.intended, tl.done) if i < t <= d)


def _trend(
    intended: array[int], value_at: array[int], start: int, end: int, interval_ns: int
) -> Trend | None:
    """Per interval of intended time, the median of ``value_at - intended``; their OLS slope
    with a Newey-West 99% interval. None when the backend reports no such time."""
    bins: dict[int, list[int]] = {}
    for t, v in zip(intended, value_at):
        if v >= 0 and start <= t < end:
            bins.setdefault((t - start) // interval_ns, []).append(v - t)
    if len(bins) < MIN_BINS:
        return None
    xs = [(k + 0.5) * interval_ns / 1e9 for k in sorted(bins)]
    ys = [_median(bins[k]) / 1e6 for k in sorted(bins)]  # ms
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    cx = [x - mx for x in xs]
    sxx = sum(c * c for c in cx)
    if sxx == 0:
        return None
    slope = sum(c * (y - my) for c, y in zip(cx, ys)) / sxx
    resid = [y - my - slope * c for c, y in zip(cx, ys)]
    lags = max(1, round(n ** (1 / 3)))
    s = sum((e * c) ** 2 for e, c in zip(resid, cx))
    for lag in range(1, lags + 1):
        w = 1 - lag / (lags + 1)
        s += 2 * w * sum(resid[t] * cx[t] * resid[t - lag] * cx[t - lag] for t in range(lag, n))
    se = math.sqrt(max(s, 0.0)) / sxx * math.sqrt(n / max(n - 2, 1))  # small-sample scaling
    lo, hi = slope - Z99 * se, slope + Z99 * se
    span_s = (end - start) / 1e9
    median = _median(ys)
    rise = slope * span_s
    return Trend(
        slope_ms_per_s=slope,
        slope_lo=lo,
        slope_hi=hi,
        rise_ms=rise,
        median_ms=median,
        intervals=n,
        rising=lo > 0 and rise > MATERIAL_RISE * max(median, 0.0),
    )


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return float(s[n // 2]) if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
