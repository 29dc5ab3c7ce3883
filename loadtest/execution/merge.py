"""Workers' outcomes merged into one run's, and their recorders into one, losslessly: histograms added, counts summed, intervals
merged by index, timelines and records joined, and the window recounted where the workers'
openings differ."""

from __future__ import annotations

from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.recorder import INTERVAL_METRICS, Interval, Recorder, interval_summary
from loadtest.execution.runner import RunOutcome
from loadtest.execution.users import SessionCounts
from loadtest.execution.worker_part import WorkerPart


def merge(parts: list[Recorder]) -> Recorder:
    """One recorder holding everything the workers' recorders hold, losslessly: histograms are
    added, counts summed, intervals merged by index, timelines and records joined. Each part's
    intervals are closed and its window left unsettled (``Runner.run(settle=False)``); call
    ``window.settle`` on the result. A window opened by each worker's first measured request
    opens at the earliest of them, and what a later-opening worker counted is recounted."""
    first = parts[0]
    out = Recorder(first.t0, first.interval_ns, None, None)
    out.window.end = first.window.end  # from the plan (the same for all), or None: settled later
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
        for name in _SUMMED:
            setattr(out, name, getattr(out, name) + getattr(p, name))
        out.errors_by_type.update(p.errors_by_type)
        if p.records is not None:
            out.records = (out.records or []) + p.records
        for attr in ("intended", "first", "admitted", "done", "measured", "good"):
            getattr(out.timeline, attr).extend(getattr(p.timeline, attr))
        for turn, h in p.turn_ttft.items():
            out.turn_ttft.setdefault(turn, LatencyHistogram()).add(h)
        for model, tally in p.by_model.items():
            out.tally(model).add(tally)
        for endpoint, tally in p.by_endpoint.items():
            out.endpoint_tally(endpoint).add(tally)
        out.turn_input_tokens.update(p.turn_input_tokens)
        out.turn_requests.update(p.turn_requests)
    out.window.merge([p.window for p in parts], out.tallies)
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
    "profiled",
    "cancelled",
    "cancelled_tokens",
)


def merge_outcomes(
    outcomes: list[RunOutcome],
    *,
    t0: int,
    interval_ns: int,
    stop: tuple[str, int] | None,
    end_ns: int,
    failure: str | None,
    lost: bool,
    workers: list[WorkerPart],
) -> RunOutcome:
    """The workers' outcomes (those that reported) as one run's: recorders merged, the window
    settled at the earliest stop (the coordinator's ``stop`` among them), counts summed; failed
    where any worker failed or was ``lost``, interrupted where any was."""
    if outcomes:
        rec = merge([o.recorder for o in outcomes])
    else:
        rec = Recorder(t0, interval_ns, None, None)
    stops = [o.stopped_ns for o in outcomes if o.stopped_ns is not None]
    if stop is not None:
        stops.append(stop[1])
    stopped = min(stops) if stops else None
    rec.window.settle(stopped)
    loop_lag = LatencyHistogram()
    for o in outcomes:
        loop_lag.add(o.loop_lag)
    statuses = {o.status for o in outcomes}
    status = (
        "failed"
        if failure or lost or "failed" in statuses
        else "interrupted"
        if "interrupted" in statuses or (stop and stop[0] == "interrupted")
        else "ok"
    )
    return RunOutcome(
        rec,
        t0,
        max([o.end_ns for o in outcomes], default=end_ns),
        status,
        loop_lag,
        sum(o.sent for o in outcomes),
        sum(o.interrupted for o in outcomes),
        failure,
        sum(o.throttled for o in outcomes),
        sessions=_sum_sessions([o.sessions for o in outcomes]),
        stopped_ns=stopped,
        workers=workers,
        loop_busy=max(  # the busiest worker's loop: the first to hold its core's limit
            (o.loop_busy for o in outcomes if o.loop_busy is not None), default=None
        ),
        prompts_at_send=sum(o.prompts_at_send for o in outcomes),
        internal_error=next((o.internal_error for o in outcomes if o.internal_error), None),
    )


def _sum_sessions(parts: list[SessionCounts | None]) -> SessionCounts | None:
    present = [p for p in parts if p is not None]
    if not present:
        return None
    total = SessionCounts()
    for p in present:
        for name in vars(total):
            setattr(total, name, getattr(total, name) + getattr(p, name))
    return total
