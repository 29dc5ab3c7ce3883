"""Where the server's true percentile can lie, given the client's own measured share of a
figure: from the figure with that share taken off (the service-time twin less the stamp
delay; the latest send's lateness off a figure with no twin) to the observed one. ITL and TPOT
are differences of two stamps, so a late stamp moves them either way."""

from __future__ import annotations

from dataclasses import dataclass

from loadtest.core.histogram import LatencyHistogram
from loadtest.results.runset import ClientShare

# A latency's service-time twin: the same figure from the actual send, not the intended one.
SERVICE_TWIN = {"ttft": "ttft_service", "e2e": "e2e_service"}
# Figures from the intended send that have no twin: the latest send's lateness may be in each.
FROM_INTENDED = {"ttft", "e2e", "queue", "ttft_answer"}
# Differences of two stamps: a late stamp moves them either way.
GAPS = {"itl", "tpot"}


@dataclass(frozen=True)
class Ends:
    """Where the server's true percentile can lie, given the client's measured share: from
    ``lo`` (that share taken off) to ``hi``; and how the misses over a bound count at each end."""

    lo: float
    hi: float
    up_shift_ms: float  # the true figure may be this much above the observed one (gaps)
    lower: LatencyHistogram  # the histogram the low end is read from
    lower_shift_ms: float  # what of the client's is still in ``lower``'s samples


def ends(metric: str, pct: float, hists: dict[str, LatencyHistogram], share: ClientShare) -> Ends:
    """The interval of ``metric``'s ``pct`` percentile that the client's own lateness leaves.

    Stamps are late by the loop's lag: where at most ``f`` per cent were later than ``x``, the
    true ``pct`` percentile is at least the observed ``pct - f`` one less ``x`` (and, for a gap
    between two stamps, each of which may be late, ``pct - 2f`` and at most ``pct + 2f`` plus
    ``x``): each end is the tightest such bound over the loop's lag ranks."""
    hist = hists[metric]
    observed, delays = hist.percentile_ms(pct), share.delays()
    if metric in GAPS:
        lo, shift = _tightest_low(hist, pct, delays, 2.0)
        hi = min(hist.percentile_ms(min(100.0, pct + 2 * f)) + x for f, x in delays)
        return Ends(min(observed, lo), max(observed, hi), max(observed, hi) - observed, hist, shift)
    # a send held by a cap or ceiling: its twin leaves out a wait that is the figure's own
    twin = None if share.held else hists.get(SERVICE_TWIN.get(metric, ""))
    if twin is not None and twin.count:
        lower, sent = twin, 0.0
    elif metric in FROM_INTENDED:
        lower, sent = hist, share.dispatch_max_ms
    else:  # a service-time figure: only the stamp is the client's
        lower, sent = hist, 0.0
    lo, shift = _tightest_low(lower, pct, delays, 1.0)
    return Ends(min(observed, max(0.0, lo - sent)), observed, 0.0, lower, shift + sent)


def _tightest_low(
    hist: LatencyHistogram, pct: float, delays: list[tuple[float, float]], stamps: float
) -> tuple[float, float]:
    """The highest lower bound of the true ``pct`` percentile over ``delays``, and its delay."""
    best = max(
        ((hist.percentile_ms(max(0.0, pct - stamps * f)) - x, x) for f, x in delays),
        key=lambda bound: bound[0],
    )
    return max(0.0, best[0]), best[1]
