"""Finished requests waiting to be recorded, and when the loop records them: off the dispatch
path, in the dispatcher's gaps, a bounded share of a loop turn at a time.

Recording costs about 1-2 µs a token, so a 256-token request holds the loop 0.1-0.4 ms. Done as
each request finishes it would sit between the dispatcher and its next send (dispatch lag) and
between a socket's read and its stamp. So it waits a moment (a whole batch that completes at
once is then recorded in one go, after the closed-loop users re-send), stops short of the next
intended send and goes on after it, and gives the loop back after each turn's share. The
garbage collector, paused for the run, runs in the same slack.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from loadtest.core.heap import collect_in_slack
from loadtest.execution.recorder import Recorder
from loadtest.execution.request import RequestState

FLUSH_S = 0.005
FLUSH_RETRY_S = 0.00005
# Recording keeps clear of the dispatcher's next deadline: it stops this long before it, less
# its own estimated cost (about 2 µs a token, measured ~1.2 µs on the 2-core machine), ...
FLUSH_GUARD_NS = 200_000
FLUSH_NS_PER_TOKEN = 2_000
# ... unless this many finished requests wait: then the machine cannot keep up anyway, and
# recording must not fall ever further behind.
FLUSH_BACKLOG = 2_000
# Recording holds the loop at most about this long a turn (a 256-token request takes ~0.1-0.2
# ms): the rest waits for the next turn, after the sockets' reads, whose stamps would wait too
FLUSH_TURN_NS = 200_000


class RecordingBacklog:
    """Finished requests, recorded into ``recorder`` when the dispatcher leaves room.

    ``next_due``: the open-loop dispatcher's next intended send (None when it has none: closed
    loop, or done); ``starting``: whether a request spawned this loop turn has yet to take its
    send stamp. Both are the dispatcher's, read at each flush."""

    def __init__(
        self,
        recorder: Recorder,
        now: Callable[[], int],
        next_due: Callable[[], int | None],
        starting: Callable[[], bool],
    ) -> None:
        self.recorder = recorder
        self._now, self._next_due, self._starting = now, next_due, starting
        self.waiting: list[RequestState] = []
        self._handle: asyncio.Handle | None = None

    @property
    def scheduled(self) -> bool:
        """Whether a flush is pending on the loop."""
        return self._handle is not None

    def add(self, st: RequestState) -> None:
        """A finished request: recorded a moment later, with whatever else finished by then."""
        self.waiting.append(st)
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(FLUSH_S, self.flush)

    def record_all(self) -> None:
        """The run is over: nothing more to dispatch, so record everything now."""
        if self._handle is not None:
            self._handle.cancel()
        self.flush(everything=True)

    def flush(self, everything: bool = False) -> None:
        """Record waiting requests, but never into the dispatcher's next deadline: stop while
        it is too near for the next request's recording, and come back a moment later; nor for
        more than a turn's share at a time. ``everything``: record them all, now."""
        self._handle = None
        loop = asyncio.get_running_loop()
        due, now = self._next_due(), self._now
        if not everything and due is not None and self._starting():
            # a request spawned in this loop turn starts in the next: its send stamp must not
            # wait for this recording
            self._handle = loop.call_soon(self.flush)
            return
        if everything:
            due = None
        rec, done = self.recorder, self.waiting
        n, turn_ends, turn_spent = 0, now() + FLUSH_TURN_NS, False
        for st in done:
            if (
                due is not None
                and len(done) - n < FLUSH_BACKLOG
                and now() + FLUSH_GUARD_NS + FLUSH_NS_PER_TOKEN * len(st.stamps) > due
            ):
                break
            if n and not everything and now() > turn_ends:
                turn_spent = True
                break
            rec.finish(st)
            n += 1
        del done[:n]
        if turn_spent:  # the rest next turn
            self._handle = loop.call_soon(self.flush)
        elif done and due is not None and now() < due:
            # stopped for the deadline: go on in the gap after it (both clocks are the loop's)
            self._handle = loop.call_at(due / 1e9, self.flush)
        elif done and due is not None:
            # the deadline passed and the dispatcher has not moved on (late, or held by a
            # max_rate ceiling): look again shortly, after a timer, so even a virtual clock moves
            self._handle = loop.call_later(FLUSH_RETRY_S, self.flush)
        elif done:
            self._handle = loop.call_later(FLUSH_S, self.flush)
        collect_in_slack(due, now)
