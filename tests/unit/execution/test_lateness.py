"""Where a late send's time went, split by hand: the machine first, then the HTTP client's waits,
the dispatcher, and the client's own work; and the verdict's sentence that names them."""

from __future__ import annotations

from loadtest.core.events import Sent
from loadtest.execution.request import Lateness, RequestState, split_lateness
from loadtest.results.validity import describe_lateness
from loadtest.workload.requests import PlannedRequest

MS = 1_000_000


def state(handed_ms: float, wire: Sent | None, cpu_wait_ms: float = -1) -> RequestState:
    req = PlannedRequest(0, 0, 8, 8, 1, None, False, True)
    st = RequestState(req, intended_ns=0, sent_ns=0, lag_from_ns=0, handed_ns=int(handed_ms * MS))
    st.wire, st.cpu_wait_ns = wire, int(cpu_wait_ms * MS) if cpu_wait_ms >= 0 else -1
    return st


def test_a_late_send_is_split_part_by_part():
    # 30 ms late: handed over at 4 ms; in the client 2 ms waiting for a pooled connection and
    # 10 ms opening a new one; the thread waited 12 ms for a CPU in all
    wire = Sent(30 * MS, pool_ns=2 * MS, connect_ns=10 * MS, off_cpu_ns=9 * MS)
    parts = split_lateness(state(4, wire, cpu_wait_ms=12), 30 * MS)
    # off the CPU 12; of the other 18: pool 2, connect 10, dispatcher 4, the client's work 2
    assert parts == Lateness(30 * MS, 4 * MS, 2 * MS, 10 * MS, 12 * MS, 2 * MS)


def test_without_the_kernels_count_the_clients_estimate_stands():
    wire = Sent(10 * MS, off_cpu_ns=6 * MS)
    assert split_lateness(state(1, wire), 10 * MS) == Lateness(
        10 * MS, 1 * MS, 0, 0, 6 * MS, 3 * MS
    )
    # a backend that stamps no send: the hand-over is all there is
    assert split_lateness(state(7, None), 7 * MS) == Lateness(7 * MS, 7 * MS, 0, 0, 0, 0)


def test_the_verdict_names_where_the_time_went_and_what_to_change():
    late = [
        Lateness(20 * MS, 0, 0, 0, 15 * MS, 5 * MS),
        Lateness(10 * MS, 0, 0, 0, 5 * MS, 5 * MS),
        Lateness(3 * MS, 3 * MS, 0, 0, 0, 0),  # under the 5 ms limit: not counted
    ]
    text = describe_lateness(late, 5 * MS)
    assert text.startswith("; where the 30.0 ms of lateness went: this process waiting for a CPU")
    assert "20.0 ms (67%)" in text and "10.0 ms (33%)" in text
    assert text.endswith("(load.validity.max_dispatch_lag_p99 sets how late is invalid)")
    assert "give the client a core of its own (taskset" in text
    assert describe_lateness(late[2:], 5 * MS) == ""
