"""Workers' recorders merged into one, losslessly: histograms added, counts summed, intervals
merged by index, timelines and records joined, and the window recounted where the workers'
openings differ."""

from __future__ import annotations

from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.recorder import INTERVAL_METRICS, Interval, Recorder, interval_summary


def merge(parts: list[Recorder]) -> Recorder:
    """One recorder holding everything the workers' recorders hold, losslessly: histograms are
    added, counts summed, intervals merged by index, timelines and records joined. Each part's
    intervals are closed and its window left unsettled (``Runner.run(settle=False)``); call
    ``settle_window`` on the result. A window opened by each worker's first measured request
    opens at the earliest of them, and what a later-opening worker counted is recounted."""
    first = parts[0]
    out = Recorder(first.t0, first.interval_ns, None, None)
    out.window_end = first.window_end  # from the plan (the same for all), or None: settled later
    starts = [p.window_start for p in parts if p.window_start is not None]
    out.window_start = min(starts) if starts else None
    out.goodput = first.goodput
    by_index: dict[int, Interval] = {}
    for p in parts:
        assert not p.open, "merge closed recorders (close_intervals)"
        for m, h in p.whole.items():
            out.whole[m].add(h)
        for m, h in p.merged.items():
            out.merged[m].add(h)
        for c in p.closed:
            iv = by_index.get(c["index"])
            if iv is None:
                hists = {m: LatencyHistogram() for m in INTERVAL_METRICS}
                iv = by_index[c["index"]] = Interval(c["index"], hists)
            iv.completed += c["completed"]
            iv.failed += c["failed"]
            for m, text in c["histograms"].items():
                iv.histograms[m].add(LatencyHistogram.decode(text))
        out.token_bins.update(p.token_bins)
        for name in _SUMMED:
            setattr(out, name, getattr(out, name) + getattr(p, name))
        out.errors_by_type.update(p.errors_by_type)
        if p.last_measured_done is not None:
            out.last_measured_done = max(out.last_measured_done or 0, p.last_measured_done)
        out._after_last_measured += p._after_last_measured
        if p.records is not None:
            out.records = (out.records or []) + p.records
        for attr in ("intended", "first", "admitted", "done", "measured", "good"):
            getattr(out.timeline, attr).extend(getattr(p.timeline, attr))
        for turn, h in p.turn_ttft.items():
            out.turn_ttft.setdefault(turn, LatencyHistogram()).add(h)
        for model, tally in p.by_model.items():
            out._tally(model).add(tally)
        for endpoint, tally in p.by_endpoint.items():
            out._endpoint_tally(endpoint).add(tally)
        out.turn_input_tokens.update(p.turn_input_tokens)
        out.turn_requests.update(p.turn_requests)
        # recount what a worker counted against its own, later, opening of the window
        if out.window_start is not None:
            counted = set(map(id, p._after_last_measured))
            for st, counted_from in p.before_start:
                if counted_from is not None:
                    out._add_window_share(st, counted_from, -1)
                out._add_window_share(st, out.window_start, 1)
                late = st.req.warmup or st.error is not None
                if out.window_end is None and late and id(st) not in counted:
                    out._after_last_measured.append(st)
    out.closed = [interval_summary(by_index[k]) for k in sorted(by_index)]
    if out.records is not None:
        out.records.sort(key=lambda r: (r["intended_ns"], r["index"]))
    return out


# the counts a merged recorder sums over its parts
_SUMMED = (
    "completed",
    "connection_retries",
    "failed",
    "warmup",
    "warmup_failed",
    "single_token",
    "token_count_mismatch",
    "output_tokens_measured",
    "input_tokens_measured",
    "reasoning_tokens_measured",
    "window_tokens",
    "window_input_tokens",
    "window_completions",
    "profiled",
    "cancelled",
    "cancelled_tokens",
)
