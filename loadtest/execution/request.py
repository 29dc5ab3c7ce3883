"""One request in flight, as the runner and the recorder see it (its plan, its stamps so far),
and where a late send's dispatch lag went."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from loadtest.core.events import Sent
from loadtest.workload.requests import PlannedRequest

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
        None  # dispatch lag counts from here (intended, the max_rate release, a slot freed)
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
    # output tokens that came with no stamp of their own: an unstreamed answer's, all at done_ns
    unstamped_tokens: int = 0
    endpoint: str | None = None  # of several endpoints, the one it was sent to
    request_id: str | None = None  # the correlation id it carried (a header), where it did
    # under an in-flight cap (load.max_in_flight), its wait for a slot from the plan's send
    # (in its TTFT and E2E, not in its dispatch lag); -1: the run has no cap
    slot_wait_ns: int = -1

    @property
    def token_count(self) -> int:
        """Output tokens received: one a stamp, and those of an unstreamed answer."""
        return len(self.stamps) + self.unstamped_tokens

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

    def record(self, t0: int) -> dict:
        """This finished request as ``requests.jsonl`` has it: its times from ``t0`` (ns), its
        derived latencies (ms), tokens streamed and reported, status, and token stamps."""
        rel = lambda t: None if t is None else t - t0  # noqa: E731
        ms = lambda a, b: None if a is None or b is None else (a - b) / 1e6  # noqa: E731
        stamps, w = self.stamps, self.wire
        gaps = [b - a for a, b in zip(stamps, stamps[1:])]
        return {
            "index": self.req.index,
            "response_id": self.response_id,
            "request_id": self.request_id,
            "session": self.req.session,
            "turn": None if self.req.session is None else self.req.turn,
            "model": self.req.model,
            "endpoint": self.endpoint,
            "status": "failed"
            if self.error
            else "warmup"
            if self.req.warmup
            else "cancelled"
            if self.cancelled
            else "ok",
            "error": self.error,
            "warmup": self.req.warmup,
            "intended_ns": rel(self.intended_ns),
            "sent_ns": rel(self.sent_ns),
            "admitted_ns": rel(self.admitted_ns),
            "connected_ns": rel(w.connected_ns) if w is not None and w.connected_ns else None,
            "first_byte_ns": rel(w.first_byte_ns) if w is not None and w.first_byte_ns else None,
            "first_token_ns": rel(stamps[0]) if stamps else None,
            "last_token_ns": rel(stamps[-1]) if stamps else None,
            "done_ns": rel(self.done_ns),
            "ttft_ms": ms(stamps[0], self.intended_ns) if stamps else None,
            "e2e_ms": ms(self.done_ns, self.intended_ns),
            "queue_ms": ms(self.admitted_ns, self.intended_ns),
            "dispatch_lag_ms": ms(self.sent_ns, self.lag_from_ns or self.intended_ns),
            "slot_wait_ms": None if self.slot_wait_ns < 0 else self.slot_wait_ns / 1e6,
            # the client's waits before the send: a pooled connection, a new one (its TCP and
            # TLS; 0 on a kept-alive one), the TLS handshake of it
            "pool_wait_ms": None if w is None else w.pool_ns / 1e6,
            "connect_ms": None if w is None else w.connect_ns / 1e6,
            "tls_ms": None if w is None else w.tls_ns / 1e6,
            "tpot_ms": (stamps[-1] - stamps[0]) / (len(stamps) - 1) / 1e6
            if len(stamps) > 1
            else None,
            "itl_max_ms": max(gaps) / 1e6 if gaps else None,
            "input_tokens": self.input_tokens,
            "planned_input_tokens": self.req.input_tokens * self.req.inputs,
            "output_tokens": self.token_count,
            "reasoning_tokens": self.reasoning_tokens,
            "ttft_answer_ms": ms(self.first_answer_ns, self.intended_ns),
            "reported_output_tokens": self.reported_tokens
            if self.reported_tokens is not None
            else self.output_tokens,
            "good": None if self.good < 0 else bool(self.good),
            "profiled": self.profiled,
            "token_ns": [t - t0 for t in stamps],
        }
