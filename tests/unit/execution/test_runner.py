"""The runner alone, on the virtual clock: sends on schedule, stops when asked, notices silence."""

from __future__ import annotations

import asyncio

from loadtest.backends import create_backend
from loadtest.config.scenario import Scenario
from loadtest.core.clock import run_virtual
from loadtest.execution.runner import Runner
from loadtest.workload.plan import build_plan

MS = 1_000_000


def scenario(backend: dict, load: dict) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "r",
            "backend": backend,
            "workload": {"input_tokens": 4, "output_tokens": 4},
            "load": load,
        }
    )


async def run(clock, sc: Scenario, stop_after_s: float | None = None):
    backend = create_backend(sc.backend, clock)
    info = await backend.start()
    plan = build_plan(sc, info.tokenizer, lambda name: name)
    runner = Runner(plan, backend, info.tokenizer, clock, sc.load, 1_000 * MS)
    if stop_after_s is not None:
        asyncio.get_running_loop().call_later(stop_after_s, runner.request_stop, "interrupted")
    try:
        return plan, await runner.run()
    finally:
        await backend.stop()


def test_every_planned_request_is_sent_at_its_intended_time():
    sc = scenario({"kind": "noop"}, {"arrival": {"kind": "constant", "rate": 10}, "duration": "2s"})
    plan, out = run_virtual(run, sc)
    assert out.status == "ok" and out.sent == plan.planned_count == 20
    lag = out.recorder.histograms()["dispatch_lag"]
    assert lag.count == 20 and lag.hdr.get_max_value() == 0  # the virtual clock is never late


def test_a_stop_ends_the_run_interrupted_and_the_rest_is_never_sent():
    sc = scenario(
        {"kind": "noop"}, {"arrival": {"kind": "constant", "rate": 10}, "duration": "10s"}
    )
    plan, out = run_virtual(run, sc, stop_after_s=3.05)
    assert out.status == "interrupted"
    # sends at 0, 0.1, ..., 3.0 s after t0 (t0 is 1 ms after the start): 31 before the stop
    assert out.sent == 31 and plan.planned_count == 100


def test_a_server_that_stops_answering_fails_the_run_at_the_stall_timeout():
    sc = scenario(
        {
            "kind": "sim",
            "max_concurrency": 4,
            "decode_ms_per_token": 1,
            "stalls": [{"at": "1s", "for": "1h"}],
        },
        {
            "arrival": {"kind": "constant", "rate": 10},
            "duration": "30s",
            "stall_timeout": "5s",
            "drain_timeout": "1s",
        },
    )
    _, out = run_virtual(run, sc)
    assert out.status == "failed"
    assert out.failure is not None and "stopped answering" in out.failure
    assert "load.stall_timeout" in out.failure
    # silent from 1 s; 5 s of silence, then the 1 s drain: over by 8 s, not after the 30 s window
    assert 6 < (out.end_ns - out.t0_ns) / 1e9 < 8


def test_the_backend_is_told_when_the_window_opens_even_at_t0():
    """A burst's window opens at t0: the engine must still hear it (its roofline accounting and
    its recompilation check count from there)."""
    from loadtest.backends.noop import NoopBackend

    told: list[int] = []

    class Listening(NoopBackend):
        def window_started(self) -> None:
            told.append(self.clock.now_ns())

    sc = scenario(
        {"kind": "noop"}, {"arrival": {"kind": "burst"}, "requests": 4, "warmup_requests": 2}
    )

    async def go(clock):
        backend = Listening(sc.backend, clock)
        info = await backend.start()
        plan = build_plan(sc, info.tokenizer, lambda name: name)
        runner = Runner(plan, backend, info.tokenizer, clock, sc.load, 1_000 * MS)
        out = await runner.run()
        return plan, out

    plan, out = run_virtual(go)
    assert plan.window_start_ns == 0 and out.status == "ok"
    assert told == [out.t0_ns]


def test_recording_keeps_clear_of_every_send_and_loses_nothing(monkeypatch):
    """Recording and collections run in the dispatcher's gaps: never within the guard (plus the
    request's estimated cost) before a planned send; at the end every request is recorded."""
    import bisect
    import gc

    from loadtest.execution import backlog as backlog_mod
    from loadtest.execution.recorder import Recorder

    finished_at: list[int] = []
    real_finish = Recorder.finish
    clock_box: list = []

    def finish(self, st):
        finished_at.append(clock_box[0].now_ns())
        return real_finish(self, st)

    monkeypatch.setattr(Recorder, "finish", finish)
    sc = scenario(
        {"kind": "noop"}, {"arrival": {"kind": "poisson", "rate": 2000}, "duration": "2s"}
    )

    async def go(clock):
        clock_box.append(clock)
        return await run(clock, sc)

    gc_before = gc.isenabled()
    plan, out = run_virtual(go)
    assert gc.isenabled() == gc_before  # automatic collection is back after the run
    sends = sorted(out.t0_ns + r.offset_ns for r in plan.requests)
    assert len(finished_at) == out.sent == plan.planned_count  # nothing lost
    budget = backlog_mod.FLUSH_GUARD_NS + backlog_mod.FLUSH_NS_PER_TOKEN * 4
    during = [f for f in finished_at if f < sends[-1]]
    assert len(during) > plan.planned_count // 2  # most are recorded while the run goes on
    for f in during:
        k = bisect.bisect_right(sends, f)  # the next send strictly after this recording
        assert sends[k] - f >= budget, (f, sends[k])


def test_live_counts_leave_the_histograms_out_unless_a_display_asks(monkeypatch):
    """A worker's heartbeat polls ``stats`` twice a second; the live histograms merge (and, in
    a worker, encode) on the worker's loop, so only a display's poll pays for them."""
    from loadtest.execution.live import LiveWants
    from loadtest.execution.recorder import Recorder
    from loadtest.execution.worker_side import WorkerSide

    merged = []
    original = Recorder.live_histograms
    monkeypatch.setattr(
        Recorder, "live_histograms", lambda self: merged.append(1) or original(self)
    )
    sc = scenario(
        {"kind": "noop"}, {"arrival": {"kind": "constant", "rate": 100}, "duration": "1s"}
    )
    seen = {}

    async def go(clock):
        backend = create_backend(sc.backend, clock)
        info = await backend.start()
        plan = build_plan(sc, info.tokenizer, lambda name: name)
        runner = Runner(plan, backend, info.tokenizer, clock, sc.load, 100 * MS)
        side = WorkerSide.__new__(WorkerSide)  # a worker's side around this runner
        side.runner = runner

        def poll():
            seen["bare"], seen["shown"] = runner.stats(False), runner.stats()
            seen["beat"] = side.stats(LiveWants())
            seen["shown_beat"] = side.stats(LiveWants(percentiles=True))

        asyncio.get_running_loop().call_later(0.5, poll)
        await runner.run()

    run_virtual(go)
    assert seen["bare"].latency.ttft_p50_ms is None and seen["bare"].sent == 50
    # noop: no latency at all; E2E too (the one live figure of answers with no token stream)
    assert seen["shown"].latency.ttft_p50_ms == 0.0 and seen["shown"].latency.e2e_p50_ms == 0.0
    assert seen["beat"].histograms is None and seen["beat"].sent == 50
    assert set(seen["shown_beat"].histograms) == {"ttft", "itl", "e2e"}  # encoded, to pool
    assert merged == [1, 1]  # the display's poll and the display's heartbeat, no other


def test_recording_holds_the_loop_a_bounded_time_a_turn_and_records_everything():
    """Each request's recording costs 150 µs here: one loop turn records while its share
    (``FLUSH_TURN_NS``, 200 µs) lasts, at least one request, so two (the second starts at 150
    µs), and the rest go on in the next turns, after the loop's reads, until all 7 are in. At
    the run's end all are recorded at once."""
    from loadtest.execution import backlog as backlog_mod
    from loadtest.execution.backlog import RecordingBacklog

    class Clock:
        t = 1_000_000_000

        def now_ns(self):
            return self.t

    class Rec:
        def __init__(self):
            self.turns: list[int] = []

        def finish(self, st):
            clock.t += 150_000
            self.turns[-1] += 1

    clock, rec = Clock(), Rec()
    backlog = RecordingBacklog(rec, clock.now_ns, lambda: None, lambda: False)  # type: ignore[arg-type]
    backlog.waiting = list(range(7))  # type: ignore[list-item]
    flush = backlog.flush

    def turn(everything=False):
        rec.turns.append(0)
        flush(everything)

    backlog.flush = turn  # type: ignore[method-assign]

    async def go():
        turn()
        while backlog.waiting:
            await asyncio.sleep(0)

    asyncio.run(go())
    assert backlog_mod.FLUSH_TURN_NS == 200_000
    assert rec.turns == [2, 2, 2, 1] and not backlog.scheduled

    async def end():  # the run's end: everything at once, nothing left for a later turn
        backlog.waiting = list(range(5))  # type: ignore[list-item]
        backlog.record_all()

    asyncio.run(end())
    assert rec.turns[-1] == 5 and backlog.waiting == [] and not backlog.scheduled


def test_the_live_totals_carry_an_open_loops_backlog_and_the_loops_lag():
    """10 req/s offered to a server that takes 250 ms a request, one at a time: 1.05 s after
    t0, 11 requests were due (at 0, 0.1, ..., 1.0 s) and 4 done (at 0.25, 0.5, 0.75, 1.0 s):
    a backlog of 7. A closed loop has none."""
    sim = {"kind": "sim", "max_concurrency": 1, "prefill_ms_per_token": 62.5,
           "decode_ms_per_token": 0}  # fmt: skip
    seen = {}

    async def go(clock, load):
        sc = scenario(sim, load)
        backend = create_backend(sc.backend, clock)
        info = await backend.start()
        plan = build_plan(sc, info.tokenizer, lambda name: name)
        runner = Runner(plan, backend, info.tokenizer, clock, sc.load, 100 * MS)

        def poll():
            seen[load["arrival"]["kind"]] = runner.stats(False, totals=True).totals

        asyncio.get_running_loop().call_later(1.051, poll)  # t0 is 1 ms after the start
        await runner.run()

    run_virtual(go, {"arrival": {"kind": "constant", "rate": 10}, "duration": "2s"})
    run_virtual(go, {"arrival": {"kind": "concurrency", "users": 2}, "duration": "2s"})
    assert seen["constant"].backlog == 7
    assert seen["constant"].histograms["loop_lag"].count > 0
    assert seen["concurrency"].backlog is None
