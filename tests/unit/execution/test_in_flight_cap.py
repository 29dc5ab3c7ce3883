"""An open loop with a cap on requests in flight (load.max_in_flight), on the virtual clock:
each wait for a slot, hand-computed, is its own figure and never the client's lateness."""

from __future__ import annotations

import asyncio

import pytest

from loadtest.backends import create_backend
from loadtest.config.scenario import Scenario
from loadtest.core.clock import VirtualClock, run_virtual
from loadtest.execution.in_flight_cap import InFlightCap, worker_share
from loadtest.execution.runner import Runner
from loadtest.workload.plan import build_plan

MS = 1_000_000
# a server that is never the limit: 4 output tokens, the first at admission, then one every
# 100 ms, so every request takes 300 ms
SERVER = {
    "kind": "sim",
    "max_concurrency": 64,
    "prefill_ms_per_token": 0,
    "decode_ms_per_token": 100,
}


def scenario(load: dict, workload: dict | None = None) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "cap",
            "backend": SERVER,
            "workload": workload or {"input_tokens": 4, "output_tokens": 4},
            "load": load,
        }
    )


async def run(clock, sc: Scenario):
    backend = create_backend(sc.backend, clock)
    info = await backend.start()
    plan = build_plan(sc, info.tokenizer, lambda name: name)
    runner = Runner(plan, backend, info.tokenizer, clock, sc.load, 1_000 * MS, keep_records=True)
    try:
        return await runner.run()
    finally:
        await backend.stop()


def test_a_request_due_while_every_slot_is_taken_waits_for_the_next_one_freed():
    """Every 100 ms, 300 ms each, 2 in flight: request k waits 100 ms x floor(k/2) (r2 due at
    200 takes r0's slot at 300; r4 due at 400 takes r2's at 600; ...)."""
    sc = scenario({"arrival": {"kind": "constant", "rate": 10}, "requests": 8, "max_in_flight": 2})
    out = run_virtual(run, sc)
    assert out.status == "ok"
    records = sorted(out.recorder.records, key=lambda r: r["index"])
    assert [r["slot_wait_ms"] for r in records] == [100.0 * (k // 2) for k in range(8)]
    # the wait is in TTFT and E2E (they count from the plan), not in the service time ...
    assert [r["ttft_ms"] for r in records] == [100.0 * (k // 2) for k in range(8)]
    assert [r["e2e_ms"] for r in records] == [100.0 * (k // 2) + 300 for k in range(8)]
    assert {(r["sent_ns"] - r["intended_ns"]) / MS for r in records} == {
        100.0 * (k // 2) for k in range(8)
    }
    # ... and never the client's lateness: every send left when its slot came free
    assert {r["dispatch_lag_ms"] for r in records} == {0.0}
    hists = out.recorder.histograms()
    assert hists["slot_wait"].count == 8
    assert hists["slot_wait"].percentile_ms(100) == pytest.approx(300, rel=1e-3)
    assert hists["dispatch_lag"].percentile_ms(100) == 0


def test_no_request_waits_while_a_slot_is_free_and_a_run_without_a_cap_has_no_slot_figure():
    capped = scenario(
        {"arrival": {"kind": "constant", "rate": 10}, "requests": 6, "max_in_flight": 3}
    )
    records = run_virtual(run, capped).recorder.records
    assert [r["slot_wait_ms"] for r in records] == [0.0] * 6  # 3 in flight at most, never 4
    free = scenario({"arrival": {"kind": "constant", "rate": 10}, "requests": 6})
    out = run_virtual(run, free)
    assert {r["slot_wait_ms"] for r in out.recorder.records} == {None}
    assert out.recorder.histograms()["slot_wait"].count == 0


def test_a_burst_under_a_cap_runs_as_that_many_users():
    """vLLM's default (--request-rate inf) with --max-concurrency 2: 6 at t0, 2 at a time."""
    sc = scenario({"arrival": {"kind": "burst"}, "requests": 6, "max_in_flight": 2})
    records = sorted(run_virtual(run, sc).recorder.records, key=lambda r: r["index"])
    assert [r["slot_wait_ms"] for r in records] == [0.0, 0.0, 300.0, 300.0, 600.0, 600.0]
    assert [r["e2e_ms"] for r in records] == [300.0, 300.0, 600.0, 600.0, 900.0, 900.0]


def test_a_session_holds_its_slot_from_its_first_turn_to_its_last():
    """Two-turn sessions every 100 ms, one slot: a session takes 600 ms, so session 1 (due at
    100) starts at 600 and its second turn waits for nothing."""
    sc = scenario(
        {"arrival": {"kind": "constant", "rate": 10}, "requests": 4, "max_in_flight": 1},
        {"input_tokens": 4, "output_tokens": 4, "multi_turn": {"turns": 2}},
    )
    records = sorted(run_virtual(run, sc).recorder.records, key=lambda r: r["intended_ns"])
    by_session = {(r["session"], r["turn"]): r for r in records}
    assert by_session[(0, 0)]["slot_wait_ms"] == 0.0 and by_session[(0, 1)]["slot_wait_ms"] == 0
    assert by_session[(1, 0)]["slot_wait_ms"] == 500.0
    assert by_session[(1, 0)]["sent_ns"] - by_session[(0, 1)]["done_ns"] == 0
    assert by_session[(1, 1)]["slot_wait_ms"] == 0.0


def test_a_waiter_cancelled_as_its_slot_is_handed_over_passes_it_on():
    async def go(clock: VirtualClock):
        cap = InFlightCap(1, clock)
        assert await cap.acquire() == 0  # free at once
        second = asyncio.ensure_future(cap.acquire())
        third = asyncio.ensure_future(cap.acquire())
        await asyncio.sleep(0)
        await clock.sleep_until(clock.now_ns() + 50 * MS)
        cap.release()  # handed to the second ...
        second.cancel()  # ... as it is cancelled: the third gets it
        await asyncio.sleep(0)
        stamp = await third
        return cap, stamp, clock.now_ns()

    cap, stamp, now = run_virtual(go)
    assert stamp == now and cap.held == 1 and cap.waited == 2
    cap.release()
    assert cap.held == 0


@pytest.mark.parametrize(
    ("load", "message"),
    [
        (
            {"arrival": {"kind": "concurrency", "users": 4}, "requests": 8, "max_in_flight": 2},
            "a closed loop's users already are its cap",
        ),
        (
            {
                "arrival": {"kind": "poisson", "rate": 5},
                "requests": 8,
                "max_in_flight": 2,
                "workers": 3,
            },
            "each needs at least one",
        ),
    ],
)
def test_a_cap_that_cannot_apply_is_refused_saying_why(load, message):
    with pytest.raises(ValueError, match=message):
        scenario(load)


def test_workers_share_the_cap_and_the_shares_add_up_to_it():
    assert [worker_share(8, i, 3) for i in range(3)] == [3, 3, 2]
    assert [worker_share(3, i, 3) for i in range(3)] == [1, 1, 1]
    assert sum(worker_share(1000, i, 7) for i in range(7)) == 1000
