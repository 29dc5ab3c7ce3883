"""Clock offsets between hosts: the round-trip rule, the UDP echo, and the shifted clock."""

from __future__ import annotations

import asyncio
import time

import pytest

from loadtest.core.clock import OffsetClock
from loadtest.execution.clock_sync import (
    SAME_CLOCK,
    ClockOffset,
    EchoServer,
    best_of,
    measure_calls,
    measure_udp,
)
from loadtest.results.model import WorkerClock
from loadtest.results.validity import _clock_reasons

MS = 1_000_000


def test_the_shortest_round_trip_decides_and_bounds_the_offset():
    # (sent, their clock, received) on our clock: trips of 10, 4 and 6 ms
    readings = [(0, 5_000 * MS, 10 * MS), (100 * MS, 5_101 * MS, 104 * MS), (200, 1, 6 * MS)]
    got = best_of(readings, "udp")
    # the 4 ms trip: midpoint 102 ms, their reading 5,101 ms -> offset 4,999 ms, ± 2 ms
    assert got == ClockOffset(4_999 * MS, 2 * MS, "udp", 3)


def test_an_echo_reports_a_host_clock_ahead_by_its_skew():
    skew = 5_000 * MS
    echo = EchoServer("127.0.0.1", skew_ns=skew)
    try:
        got = measure_udp("127.0.0.1", echo.port, samples=32)
    finally:
        echo.close()
    assert got is not None and got.method == "udp" and got.samples == 32
    assert abs(got.offset_ns - skew) <= got.uncertainty_ns  # the rule's own bound holds
    assert got.uncertainty_ns < 50 * MS  # loopback: well under a busy machine's hiccup


def test_no_echo_means_no_udp_offset_and_calls_can_stand_in():
    echo = EchoServer("127.0.0.1")
    port = echo.port
    echo.close()  # nothing answers there now
    assert measure_udp("127.0.0.1", port, samples=3, timeout_s=0.05) is None
    got = measure_calls(lambda: time.monotonic_ns() + 7 * MS, samples=5)
    assert got.method == "ray" and abs(got.offset_ns - 7 * MS) <= got.uncertainty_ns


def test_an_offset_clock_reads_and_sleeps_on_the_other_timeline():
    clock = OffsetClock(offset_ns=-3_000 * MS)  # this host's clock is 3 s behind the other's

    async def go():
        before = time.monotonic_ns()
        target = clock.now_ns() + 20 * MS  # 20 ms from now, on the other timeline
        await clock.sleep_until(target)
        return before, time.monotonic_ns(), clock.now_ns() - target

    before, after, late = asyncio.run(go())
    assert clock.now_ns() - time.monotonic_ns() == pytest.approx(3_000 * MS, abs=5 * MS)
    assert 0 <= late < 200 * MS and after - before >= 20 * MS


@pytest.mark.parametrize(
    "clock, reasons",
    [
        (None, 0),  # one host, one clock: nothing to judge
        (WorkerClock(method="udp", offset_ms=5000.0, uncertainty_ms=0.05), 0),
        (WorkerClock(method="ray", offset_ms=0.1, uncertainty_ms=2.6), 1),  # > 5 ms / 2
        (  # drifted 3 ms, known to ± 0.1 ms: more than half the limit
            WorkerClock(
                method="udp",
                offset_ms=1.0,
                uncertainty_ms=0.05,
                drift_ms=-3.0,
                drift_uncertainty_ms=0.1,
            ),
            1,
        ),
        (  # 3 ms of apparent drift inside ± 2.9 ms of measurement: not shown to drift
            WorkerClock(
                method="ray",
                offset_ms=1.0,
                uncertainty_ms=1.45,
                drift_ms=3.0,
                drift_uncertainty_ms=2.9,
            ),
            0,
        ),
    ],
)
def test_a_clock_known_too_loosely_for_the_dispatch_limit_makes_a_reason(clock, reasons):
    assert len(_clock_reasons(clock, 5 * MS)) == reasons


def test_the_same_clock_has_no_offset_and_no_doubt():
    assert (SAME_CLOCK.offset_ns, SAME_CLOCK.uncertainty_ns) == (0, 0)
