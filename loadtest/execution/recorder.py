"""Events -> histograms. All latency arithmetic happens here, once per request, at completion.

During a request only its token stamps are appended (a list append per token); when it finishes,
its TTFT, ITL gaps, TPOT, E2E, queue time and dispatch lag are computed and recorded. Requests
are binned by completion time into intervals; ITL, TTFT and E2E are recorded once, into their
interval's histogram, and the whole-run histogram is the exact merge of the intervals (hdrh
merges losslessly). A closed interval is merged, encoded and freed, so memory stays flat.

Throughput counts what happened inside the measured window (``window.Window``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from loadtest.core.histogram import LatencyHistogram
from loadtest.core.histogram import merge as merge_histograms
from loadtest.core.json_types import JsonObject
from loadtest.execution.answer_check import AnswerCheck
from loadtest.execution.live import LIVE_METRICS, TOTAL_METRICS, LiveTotals
from loadtest.execution.request import (
    LATE_FLOOR_NS,
    LATE_KEPT,
    Lateness,
    RequestState,
    split_lateness,
)
from loadtest.execution.timeline import Timeline
from loadtest.execution.window import Window
from loadtest.telemetry.profile_window import ProfileWindow

INTERVAL_METRICS = ("ttft", "itl", "e2e")
WHOLE_ONLY_METRICS = (
    "ttft_service",
    "ttft_answer",
    "tpot",
    "e2e_service",
    "queue",
    "dispatch_lag",
    "slot_wait",  # under an in-flight cap (load.max_in_flight), from the plan to a free slot
    "cancelled_ttft",  # of requests the plan cancelled (load.cancel), apart from the others
    "cancelled_at",  # when they were cancelled, from their intended send
)
TURN_BUCKETS = 16  # multi-turn TTFT is kept per turn up to here; later turns share the last
ALL_METRICS = (
    "ttft",
    "ttft_service",
    "ttft_answer",
    "itl",
    "tpot",
    "e2e",
    "e2e_service",
    "queue",
    "dispatch_lag",
    "slot_wait",
)


@dataclass
class Interval:
    """One reporting interval's histograms and counts."""

    index: int
    histograms: dict[str, LatencyHistogram]
    completed: int = 0
    failed: int = 0
    output_tokens: int = 0  # stamped in this interval (any request)


MODEL_METRICS = ("ttft", "itl", "tpot", "e2e")  # what a model mix breaks down per model


@dataclass
class ModelTally:
    """One share of the traffic (a model of a model mix, an endpoint of several): its
    latencies and counts (measured requests)."""

    histograms: dict[str, LatencyHistogram] = field(
        default_factory=lambda: {m: LatencyHistogram() for m in MODEL_METRICS}
    )
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    window_tokens: int = 0
    window_completions: int = 0

    def add(self, other: ModelTally) -> None:
        for m, h in other.histograms.items():
            self.histograms[m].add(h)
        for name in ("completed", "failed", "cancelled", "window_tokens", "window_completions"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def record(self, st: RequestState) -> None:
        """A completed request's latencies into this share's histograms."""
        stamps, h = st.stamps, self.histograms
        self.completed += 1
        h["e2e"].record_ns(st.done - st.intended_ns)
        if stamps:
            h["ttft"].record_ns(stamps[0] - st.intended_ns)
            h["itl"].record_gaps_ns(stamps)
            if len(stamps) >= 2:
                h["tpot"].record_ns((stamps[-1] - stamps[0]) // (len(stamps) - 1))


# goodput objectives in ns (ttft, tpot, e2e; None: not set)
Goodput = tuple[int | None, int | None, int | None]


class Recorder:
    """Latency histograms (whole run and per interval), window counts and token bins, from finished requests."""

    def __init__(
        self, t0_ns: int, interval_ns: int, window_start_ns: int | None, window_end_ns: int | None
    ) -> None:
        self.t0 = t0_ns
        self.interval_ns = interval_ns
        self.window = Window(
            t0_ns,
            interval_ns,
            None if window_start_ns is None else t0_ns + window_start_ns,
            None if window_end_ns is None else t0_ns + window_end_ns,
        )
        self.whole = {m: LatencyHistogram() for m in WHOLE_ONLY_METRICS}
        self.merged = {m: LatencyHistogram() for m in INTERVAL_METRICS}
        self.open: dict[int, Interval] = {}
        self.closed: list[dict] = []  # summaries + encoded histograms of closed intervals
        self.completed = self.failed = self.warmup = self.warmup_failed = 0
        # sends onto a kept-alive connection the server had closed, sent again (every request)
        self.connection_retries = 0
        self.errors_by_type: Counter[str] = Counter()
        self.single_token = 0  # requests with <2 tokens: TPOT undefined, counted not recorded
        self.token_count_mismatch = 0
        self.output_tokens_measured = self.input_tokens_measured = 0
        self.reasoning_tokens_measured = 0  # of output_tokens_measured, reasoning
        # measured requests the plan cancelled mid-stream, and the tokens they had received
        self.cancelled = self.cancelled_tokens = 0
        self.by_model: dict[str, ModelTally] = {}  # a model mix: each model's share
        self.by_endpoint: dict[str, ModelTally] = {}  # several endpoints: each one's share
        self.records: list[dict] | None = None
        self.trace: Callable[[RequestState], None] | None = None  # each request, as a span
        self.answers: AnswerCheck | None = None  # answers: each compared with its reference
        self.timeline = Timeline()  # every finished request's times: the stability judgement
        # every request's (first token ns, first token - sent ns), warm-up and profiled ones
        # too: a server's own TTFT histogram counts all of them, and is compared with these
        self.first_tokens: list[tuple[int, int]] = []
        self.late_sends: list[Lateness] = []  # measured sends LATE_FLOOR_NS or more late
        # goodput objectives in ns (ttft, tpot, e2e; None = not set), or None: not judged
        self.goodput: Goodput | None = None
        # requests overlapping the profiler's window are flagged (and maybe excluded)
        self.profile: ProfileWindow | None = None
        self.profiled = 0
        # multi-turn: TTFT by turn (0-based, capped at TURN_BUCKETS - 1) and prompt tokens summed
        self.turn_ttft: dict[int, LatencyHistogram] = {}
        self.turn_input_tokens: Counter[int] = Counter()
        self.turn_requests: Counter[int] = Counter()

    # -- the per-request path -------------------------------------------------------------

    def finish(self, st: RequestState) -> None:
        """Record a finished request: its latencies, or its failure, and its tokens in the window."""
        if self.trace is not None:
            self.trace(st)
        if self.answers is not None:
            self.answers.observe(st)
        self.window.count(st, self.tallies)
        if st.wire is not None and st.wire.retries:
            self.connection_retries += st.wire.retries
        if st.stamps:
            self.first_tokens.append((st.stamps[0], st.stamps[0] - st.sent_ns))
        if self.goodput is not None and not st.req.warmup and not st.cancelled:
            st.good = meets_goodput(
                self.goodput, st
            )  # once: the timeline and the exported record share it
        self.timeline.add(
            st.intended_ns,
            st.stamps[0] if st.stamps else None,
            st.admitted_ns,
            st.done,
            not st.req.warmup and not st.cancelled,  # a cancelled one's latencies are cut short
            st.good,
        )
        if st.req.warmup:
            self.warmup += 1
            self._keep_record(st)
            return
        tallies = self.tallies(st)
        if st.cancelled:  # kept apart: its partial figures are not a finished request's
            for tally in tallies:
                tally.cancelled += 1
            self.cancelled += 1
            self.cancelled_tokens += len(st.stamps)
            if st.stamps:
                self.whole["cancelled_ttft"].record_ns(st.stamps[0] - st.intended_ns)
            self.whole["cancelled_at"].record_ns(st.done - st.intended_ns)
            self._keep_record(st)
            self.window.measured_done(st)
            return
        if st.error is not None:
            for tally in tallies:
                tally.failed += 1
            self.failed += 1
            self.errors_by_type[st.error] += 1
            self._interval(st.done).failed += 1
            self._keep_record(st)
            self.window.measured_done(st)
            return
        self.completed += 1
        if self.profile is not None and self.profile.overlaps(st.sent_ns, st.done):
            st.profiled = True
            self.profiled += 1
            if self.profile.spec.exclude_from_stats:  # counted as completed; latencies left out
                self.output_tokens_measured += st.token_count
                self.input_tokens_measured += st.input_tokens
                self._keep_record(st)
                self.window.measured_done(st)
                return
        self._record_latencies(st)
        for tally in tallies:
            tally.record(st)
        self._keep_record(st)
        self.window.measured_done(st)

    def tally(self, model: str) -> ModelTally:
        return self.by_model.get(model) or self.by_model.setdefault(model, ModelTally())

    def endpoint_tally(self, endpoint: str) -> ModelTally:
        return self.by_endpoint.get(endpoint) or self.by_endpoint.setdefault(endpoint, ModelTally())

    def tallies(self, st: RequestState) -> list[ModelTally]:
        """The shares ``st`` counts in: its model's (a model mix), its endpoint's (several)."""
        out = [] if st.req.model is None else [self.tally(st.req.model)]
        if st.endpoint is not None:
            out.append(self.endpoint_tally(st.endpoint))
        return out

    def _record_latencies(self, st: RequestState) -> None:
        stamps, intended, sent = st.stamps, st.intended_ns, st.sent_ns
        iv = self._interval(st.done)
        iv.completed += 1
        h = iv.histograms
        self.output_tokens_measured += st.token_count
        self.input_tokens_measured += st.input_tokens
        if st.output_tokens is not None and st.output_tokens != st.token_count:
            self.token_count_mismatch += 1
        if st.req.session is not None:
            turn = min(st.req.turn, TURN_BUCKETS - 1)
            self.turn_input_tokens[turn] += st.input_tokens
            self.turn_requests[turn] += 1
            if turn not in self.turn_ttft:
                self.turn_ttft[turn] = LatencyHistogram()
            if stamps:
                self.turn_ttft[turn].record_ns(stamps[0] - intended)
        if st.reasoning_tokens:
            self.reasoning_tokens_measured += st.reasoning_tokens
        if st.first_answer_ns is not None:
            self.whole["ttft_answer"].record_ns(st.first_answer_ns - intended)
        if stamps:
            h["ttft"].record_ns(stamps[0] - intended)
            self.whole["ttft_service"].record_ns(stamps[0] - sent)
            h["itl"].record_gaps_ns(stamps)
            if len(stamps) >= 2:
                self.whole["tpot"].record_ns((stamps[-1] - stamps[0]) // (len(stamps) - 1))
            else:
                self.single_token += 1
        elif not st.unstamped_tokens:  # an unstreamed answer claims no TPOT to leave out
            self.single_token += 1
        h["e2e"].record_ns(st.done - intended)
        self.whole["e2e_service"].record_ns(st.done - sent)
        lag = sent - (st.lag_from_ns or intended)
        self.whole["dispatch_lag"].record_ns(lag)
        if lag >= LATE_FLOOR_NS and len(self.late_sends) < LATE_KEPT:
            self.late_sends.append(split_lateness(st, lag))
        if st.slot_wait_ns >= 0:
            self.whole["slot_wait"].record_ns(st.slot_wait_ns)
        if st.admitted_ns is not None:
            self.whole["queue"].record_ns(max(0, st.admitted_ns - intended))

    def _interval(self, t_ns: int) -> Interval:
        k = (t_ns - self.t0) // self.interval_ns
        iv = self.open.get(k)
        if iv is None:
            iv = self.open[k] = Interval(k, {m: LatencyHistogram() for m in INTERVAL_METRICS})
            for old in [j for j in self.open if j < k - 2]:
                self._close(self.open.pop(old))
        return iv

    def _close(self, iv: Interval) -> None:
        for m, h in iv.histograms.items():
            self.merged[m].add(h)
        self.closed.append(interval_summary(iv))

    def _keep_record(self, st: RequestState) -> None:
        if self.records is not None:
            self.records.append(st.record(self.t0))

    # -- end of run -----------------------------------------------------------------------

    def close(self, stopped_ns: int | None = None) -> None:
        """Merge every open interval and settle the window's end."""
        self.close_intervals()
        self.window.settle(stopped_ns)

    def close_intervals(self) -> None:
        """Merge every open interval into the whole-run histograms."""
        for k in sorted(self.open):
            self._close(self.open.pop(k))
        self.closed.sort(key=lambda c: c["index"])

    def __getstate__(self) -> dict:
        # a worker's recorder travels to its parent whole; a profiler window stays behind
        assert self.profile is None, "a recorder with a profiler window cannot leave its process"
        return self.__dict__

    def histograms(self) -> dict[str, LatencyHistogram]:
        """The whole-run histogram of every metric."""
        return {m: (self.merged[m] if m in self.merged else self.whole[m]) for m in ALL_METRICS}

    def totals(
        self, loop_lag: LatencyHistogram | None = None, due: int | None = None
    ) -> LiveTotals:
        """The measured requests so far, for a metrics endpoint: counts, tokens, failures by
        type, and each exported metric's histogram to date (the closed intervals' merge plus
        the open ones', copies); with the event loop's ``loop_lag`` (a copy), and an open
        loop's backlog: the requests ``due`` by now and not yet done."""
        histograms = {}
        for metric in TOTAL_METRICS:
            if metric in self.merged:
                parts = [self.merged[metric], *(iv.histograms[metric] for iv in self.open.values())]
                histograms[metric] = merge_histograms(h for h in parts if h.count)
            else:
                histograms[metric] = merge_histograms([self.whole[metric]])
        if loop_lag is not None:
            histograms["loop_lag"] = merge_histograms([loop_lag])
        return LiveTotals(
            completed=self.completed,
            failed=self.failed,
            output_tokens=self.output_tokens_measured,
            input_tokens=self.input_tokens_measured,
            failed_by_type=dict(self.errors_by_type),
            histograms=histograms,
            backlog=None if due is None else max(0, due - len(self.timeline)),
        )

    def live_histograms(self) -> dict[str, LatencyHistogram]:
        """TTFT, ITL and E2E over the open intervals (the last few seconds), each merged into a copy;
        the recorded histograms are not touched."""
        return {
            metric: merge_histograms(
                iv.histograms[metric] for iv in self.open.values() if iv.histograms[metric].count
            )
            for metric in LIVE_METRICS
        }


def interval_summary(iv: Interval) -> JsonObject:
    """A closed interval as the result keeps it: counts, p50/p99 and the encoded histograms."""
    summary: JsonObject = {"index": iv.index, "completed": iv.completed, "failed": iv.failed}
    for m in INTERVAL_METRICS:
        h = iv.histograms[m]
        p50, p99 = h.percentiles_ms((50, 99)) if h.count else (None, None)
        summary[f"{m}_p50_ms"], summary[f"{m}_p99_ms"] = p50, p99
    summary["histograms"] = {m: h.encode() for m, h in iv.histograms.items() if h.count}
    return summary


def meets_goodput(goodput: Goodput, st: RequestState) -> int:
    """1 when a finished request met every goodput objective, else 0 (a failure never does)."""
    ttft, tpot, e2e = goodput
    stamps = st.stamps
    if st.error is not None:
        return 0
    if not stamps:  # no token stream (embeddings, rerank): only e2e can be set
        return int(
            ttft is None and tpot is None and e2e is not None and st.done - st.intended_ns <= e2e
        )
    if ttft is not None and stamps[0] - st.intended_ns > ttft:
        return 0
    if e2e is not None and st.done - st.intended_ns > e2e:
        return 0
    if tpot is not None and len(stamps) > 1:
        if (stamps[-1] - stamps[0]) // (len(stamps) - 1) > tpot:
            return 0
    return 1
