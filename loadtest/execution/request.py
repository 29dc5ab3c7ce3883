"""One request in flight, as the runner and the recorder see it (its plan, its stamps so far),
and where a late send's dispatch lag went."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from loadtest.core.events import Sent
from loadtest.workload.plan import PlannedRequest

LATE_FLOOR_NS = 1_000_000  # sends this late or later keep where their lateness went
LATE_KEPT = 100_000  # at most this many


class Lateness(NamedTuple):
    """Where one send's dispatch lag went (ns): the dispatcher (from the plan's time to the
    hand-over: the event loop, or this process waiting for a CPU), then, inside an HTTP
    client, a pooled connection's wait, a new connection, this process off the CPU, and the
    client's own work."""

    lag: int
    dispatcher: int
    pool: int
    connect: int
    off_cpu: int
    client_work: int


def split_lateness(st: RequestState, lag: int) -> Lateness:
    """Split a late send's lag: the time its thread waited for a CPU first (the scheduler's
    own count, or the HTTP client's estimate where the kernel gives none), then the client's
    waits for a pooled and a new connection, then the dispatcher's part, and the rest was the
    client's own work."""
    w = st.wire
    estimate = 0 if w is None else w.off_cpu_ns
    off_cpu = min(lag, st.cpu_wait_ns if st.cpu_wait_ns >= 0 else estimate)
    rest = lag - off_cpu
    pool = min(rest, 0 if w is None else w.pool_ns)
    connect = min(rest - pool, 0 if w is None else w.connect_ns)
    handed = max(0, st.handed_ns - (st.lag_from_ns or st.intended_ns))
    dispatcher = min(rest - pool - connect, handed)
    return Lateness(lag, dispatcher, pool, connect, off_cpu, rest - pool - connect - dispatcher)


@dataclass(slots=True)
class RequestState:
    """One request in flight: its plan, its stamps so far."""

    req: PlannedRequest
    intended_ns: int
    sent_ns: int
    admitted_ns: int | None = None
    stamps: list[int] = field(default_factory=list)
    done_ns: int | None = None
    output_tokens: int | None = None
    error: str | None = None
    lag_from_ns: int | None = (
        None  # dispatch lag counts from here (intended, or the max_rate release)
    )
    profiled: bool = False  # overlapped a profiler capture window
    response_id: str | None = None  # the server's id, where it gives one
    reported_tokens: int | None = None  # the server's own count, where it reports one
    good: int = -1  # goodput: 1 met every objective, 0 did not, -1 not judged
    reply: str | None = None  # a session turn's reply text (its next turn's history); never stored
    prompt_tokens: int | None = None  # the server's count of the prompt, where it reports one
    handed_ns: int = 0  # when the runner handed it to the backend (sent_ns may move later)
    # of a late send: the loop thread's wait for a CPU up to it (-1: the kernel does not say)
    cpu_wait_ns: int = -1
    wire: Sent | None = None  # the backend's own stamp of the send, with its parts
    reasoning_tokens: int = 0  # of the output, a reasoning model's thinking
    first_answer_ns: int | None = None  # a reasoning model's first answer token
    cancelled: bool = False  # the plan cancelled it mid-stream (load.cancel): done_ns is when

    @property
    def input_tokens(self) -> int:
        """The prompt's tokens: the server's count where it gave one (what it processed),
        else the client's."""
        if self.prompt_tokens is not None:
            return self.prompt_tokens
        return self.req.input_tokens * self.req.inputs

    @property
    def done(self) -> int:
        """``done_ns`` of a finished request: the recorder is only given finished ones."""
        assert self.done_ns is not None, "an unfinished request reached the recorder"
        return self.done_ns
