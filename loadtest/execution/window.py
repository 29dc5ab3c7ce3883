"""The measured window's throughput counts: output tokens stamped inside [start, end), input
tokens of requests that started in it, requests finished in it, and every interval's tokens.

A count-based window ends when its last measured request is done, which is only known at the
end: completions after that moment are kept aside until ``settle``. One of several workers whose
window opens with its first measured request keeps what it counted before its own opening, so
the merge can recount it against the earliest opening of all (``merge``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

from loadtest.execution.request import RequestState


class Share(Protocol):
    """A share of the traffic (a model's, an endpoint's) that counts its own window."""

    window_tokens: int
    window_completions: int


# the shares a request counts in, besides the whole
Shares = Callable[[RequestState], Sequence[Share]]


class Window:
    """The window [start, end) in clock ns (None: not opened yet, or ends with the last
    measured request) and what was counted in it."""

    def __init__(self, t0_ns: int, interval_ns: int, start: int | None, end: int | None) -> None:
        self.t0, self.interval_ns = t0_ns, interval_ns
        self.start, self.end = start, end
        self.tokens = self.input_tokens = self.completions = 0
        self.token_bins: Counter[int] = Counter()  # interval index -> output tokens stamped
        self.after_last_measured: list[RequestState] = []
        self.last_measured_done: int | None = None
        # one of several workers whose window opens with its first measured request: the
        # requests counted against this worker's opening, which another's may precede
        self.keep_before_start = False
        self.before_start: list[tuple[RequestState, int | None]] = []  # (request, start it met)

    def open_at(self, t_ns: int) -> None:
        """Closed loop, count-based warmup: the window opens when the first measured request
        is sent."""
        if self.start is None:
            self.start = t_ns

    def count(self, st: RequestState, shares: Shares) -> None:
        """A finished request's tokens into their intervals, and its share of the window."""
        stamps = st.stamps
        if stamps:
            first = (stamps[0] - self.t0) // self.interval_ns
            last = (stamps[-1] - self.t0) // self.interval_ns
            if first == last:
                self.token_bins[first] += len(stamps)
            else:  # each interval's share found by bisection (stamps are in order)
                lo = 0
                for b in range(first, last + 1):
                    hi = bisect_left(stamps, self.t0 + (b + 1) * self.interval_ns, lo)
                    if hi > lo:
                        self.token_bins[b] += hi - lo
                    lo = hi
        if st.unstamped_tokens:  # an unstreamed answer's tokens came when it did
            self.token_bins[(st.done - self.t0) // self.interval_ns] += st.unstamped_tokens
        start = self.start
        if self.keep_before_start and (start is None or (stamps and stamps[0] < start)):
            self.before_start.append((st, start))
        if start is None:
            return  # a warmup request finishing before the window opened
        self.add_share(st, start, 1, shares(st))
        if self.end is None and (st.req.warmup or st.error is not None):
            self.after_last_measured.append(st)

    def add_share(self, st: RequestState, start: int, sign: int, shares: Sequence[Share]) -> None:
        """Count (``sign`` 1) or uncount (-1) what ``st`` adds to the window opening at ``start``."""
        stamps, end = st.stamps, self.end
        lo = bisect_left(stamps, start)
        hi = len(stamps) if end is None else bisect_left(stamps, end)
        self.tokens += sign * max(0, hi - lo)
        for share in shares:
            share.window_tokens += sign * max(0, hi - lo)
        if lo == 0 and hi > 0:
            self.input_tokens += sign * st.input_tokens
        finished = st.error is None and not st.cancelled
        if not stamps and finished and st.done >= start and (end is None or st.done < end):
            # an answer with no token stream (embeddings, rerank, an unstreamed reply): its
            # input counts when done, and its output (unstamped) with it
            self.input_tokens += sign * st.input_tokens
            self.tokens += sign * st.unstamped_tokens
            for share in shares:
                share.window_tokens += sign * st.unstamped_tokens
        if finished and st.done >= start and (end is None or st.done < end):
            self.completions += sign
            for share in shares:
                share.window_completions += sign

    def measured_done(self, st: RequestState) -> None:
        """A measured request finished (completed, failed or cancelled)."""
        if self.end is None and st.error is None:
            self.after_last_measured.clear()
        if self.last_measured_done is None or st.done > self.last_measured_done:
            self.last_measured_done = st.done

    def settle(self, stopped_ns: int | None = None) -> None:
        """Settle the window's end: a run stopped early (a signal, a failure) measured only up
        to the stop, and its rates divide by that span; a window that ends with its last
        measured request ends when that request is done."""
        if stopped_ns is not None and (self.end is None or stopped_ns < self.end):
            if self.start is not None and stopped_ns > self.start:
                self.end = stopped_ns
        if self.end is None and self.last_measured_done is not None:
            self.end = end = self.last_measured_done + 1
            for st in self.after_last_measured:  # finished after the window closed
                self.tokens -= len(st.stamps) - bisect_left(st.stamps, end)
                if st.stamps and st.stamps[0] >= end:
                    self.input_tokens -= st.input_tokens
                elif not st.stamps and st.error is None and st.done >= end:
                    self.input_tokens -= st.input_tokens
                if st.error is None and st.done >= end:
                    self.completions -= 1
            self.after_last_measured.clear()

    def merge(self, parts: list[Window], shares: Shares) -> None:
        """Add the workers' windows (each unsettled) into this one, whose start is the earliest
        of theirs: what a worker counted against its own, later, opening is recounted."""
        starts = [p.start for p in parts if p.start is not None]
        self.start = min(starts) if starts else None
        for p in parts:
            self.token_bins.update(p.token_bins)
            self.tokens += p.tokens
            self.input_tokens += p.input_tokens
            self.completions += p.completions
            if p.last_measured_done is not None:
                self.last_measured_done = max(self.last_measured_done or 0, p.last_measured_done)
            self.after_last_measured += p.after_last_measured
            if self.start is None:
                continue
            counted = set(map(id, p.after_last_measured))
            for st, counted_from in p.before_start:
                if counted_from is not None:
                    self.add_share(st, counted_from, -1, shares(st))
                self.add_share(st, self.start, 1, shares(st))
                late = st.req.warmup or st.error is not None
                if self.end is None and late and id(st) not in counted:
                    self.after_last_measured.append(st)
