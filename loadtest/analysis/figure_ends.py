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
    """The interval of ``metric``'s ``pct`` percentile that the client's own lateness leaves."""
    hist = hists[metric]
    observed, stamp = hist.percentile_ms(pct), share.stamp_delay_ms
    if metric in GAPS:
        return Ends(max(0.0, observed - stamp), observed + stamp, stamp, hist, stamp)
    twin = hists.get(SERVICE_TWIN.get(metric, ""))
    if twin is not None and twin.count:
        lower, shift = twin, stamp
    elif metric in FROM_INTENDED:
        lower, shift = hist, share.dispatch_max_ms + stamp
    else:  # a service-time figure: only the stamp is the client's
        lower, shift = hist, stamp
    lo = min(observed, max(0.0, lower.percentile_ms(pct) - shift))
    return Ends(lo, observed, 0.0, lower, shift)
