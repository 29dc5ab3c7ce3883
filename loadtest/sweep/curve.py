"""A sweep's curve: each point's headline figures, the throughput-latency frontier, the knee
and what to be careful of in it."""

from __future__ import annotations

from loadtest.results.model import (
    HEADLINE,
    Cheapest,
    CurvePoint,
    RunMetrics,
    SweepPoint,
)


def headline(metrics: RunMetrics | None) -> dict:
    """A point's headline figures under the curve's column names (``ttft_p99`` -> ``ttft_p99_ms``)."""
    if metrics is None:
        return {}
    return {
        (name if name.endswith("_per_s") else f"{name}_ms"): metrics.headline(name)
        for name in HEADLINE
        if name != "e2e_p50"
    }


def curves(rows: list[SweepPoint], axis: str) -> tuple[list[CurvePoint], list, object]:
    """The curve (one entry per point), the throughput-latency frontier, and the knee.

    Frontier: steady points no other steady point beats on both output tok/s (higher) and p99
    E2E (lower). Knee: the steady point of highest power, throughput / p99 E2E (Kleinrock): past
    it, each extra token/s costs more latency than it buys.
    """
    first = axis.split(",")[0].strip()
    curve = [
        CurvePoint(
            x=r.params.get(first),
            status=r.status,
            steady=None
            if r.metrics is None or r.metrics.stability is None
            else r.metrics.stability.steady,
            goodput_rps=None
            if r.metrics is None or r.metrics.goodput is None
            else r.metrics.goodput.good_requests_per_s,
            usd_per_million_output_tokens=None
            if r.metrics is None or r.metrics.cost is None
            else r.metrics.cost.usd_per_million_output_tokens,
            sla=None if r.metrics is None or r.metrics.sla is None else r.metrics.sla.verdict,
            **headline(r.metrics),
        )
        for r in rows
    ]
    # (x, output tok/s, p99 E2E) of the steady points with both figures: an overloaded point's
    # p99 grows with the run's length, so it belongs on no frontier
    usable = [
        (c.x, c.output_tokens_per_s, c.e2e_p99_ms)
        for c in curve
        if c.status in ("ok", "invalid")
        and c.steady is not False
        and c.output_tokens_per_s
        and c.e2e_p99_ms
    ]
    frontier = [
        x
        for x, tput, p99 in usable
        if not any(t >= tput and p <= p99 and (t, p) != (tput, p99) for _, t, p in usable)
    ]
    knee = max(usable, key=lambda u: u[1] / u[2], default=None)
    return curve, frontier, None if knee is None else knee[0]


def cheapest(curve: list[CurvePoint]) -> Cheapest | None:
    """The priced point of lowest cost per million output tokens that meets the SLA (where the
    points have one), else the lowest among the valid steady points; None if none is priced."""
    usable = [
        c
        for c in curve
        if c.status == "ok" and c.steady is not False and c.usd_per_million_output_tokens
    ]
    judged = any(c.sla is not None for c in curve)
    among = "points that meet the SLA" if judged else "valid steady points (no SLA set)"
    if judged:
        usable = [c for c in usable if c.sla == "PASS"]
    best = min(usable, key=lambda c: c.usd_per_million_output_tokens or 0.0, default=None)
    if best is None or best.usd_per_million_output_tokens is None:
        return None
    return Cheapest(
        x=best.x, usd_per_million_output_tokens=best.usd_per_million_output_tokens, among=among
    )


def knee_caveats(curve: list[CurvePoint], knee) -> list[str]:
    """What a reader must know before trusting the knee: it sits at an end of the range, rests on
    invalid or few points, or there is none."""
    usable = [
        c
        for c in curve
        if c.status in ("ok", "invalid") and c.steady is not False and c.output_tokens_per_s
    ]
    if knee is None:
        return ["no knee: no steady point with throughput and p99 E2E"]
    out = []
    xs = [c.x for c in curve]
    if knee == xs[-1]:
        out.append("the knee is the range's last point: the curve may go on rising past it")
    elif knee == xs[0]:
        out.append("the knee is the range's first point: the best trade-off may lie below it")
    invalid = [c.x for c in usable if c.status == "invalid"]
    if invalid:
        out.append(f"invalid points are on the curve (each point's reason says why): {invalid}")
    unsteady = [c.x for c in curve if c.steady is False]
    if unsteady:
        out.append(f"overloaded points are left out of the knee and frontier: {unsteady}")
    if len(usable) < 3:
        out.append(f"only {len(usable)} usable point(s): too few to locate a knee")
    return out
