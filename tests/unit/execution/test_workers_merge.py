"""Worker processes' parts: the plan split, and their recorders merged into one run's."""

from __future__ import annotations

import asyncio
import pickle

from loadtest.config.scenario import Scenario
from loadtest.execution.merge import merge
from loadtest.execution.recorder import Recorder
from loadtest.workload.plan import build_plan
from loadtest.workload.tokenizer import ByteTokenizer
from tests.unit.execution.test_recorder import MS, S, state


def plan_for(load: dict, **workload):
    scenario = Scenario.model_validate(
        {"name": "s", "load": load, "workload": {"input_tokens": 8, "output_tokens": 4, **workload}}
    )
    return build_plan(scenario, ByteTokenizer(), lambda name: name)


def test_open_loop_parts_interleave_into_exactly_the_plan():
    plan = plan_for({"arrival": {"kind": "poisson", "rate": 100}, "duration": "2s"})
    parts = [plan.share(w, 3) for w in range(3)]
    assert [len(p.requests) for p in parts] == [
        len(plan.requests[w::3]) for w in range(3)
    ]  # every third arrival, in order
    merged = sorted((r for p in parts for r in p.requests), key=lambda r: r.index)
    assert merged == plan.requests  # nothing lost, nothing twice, offsets unchanged
    assert all(p.window_start_ns == plan.window_start_ns for p in parts)


def test_a_session_and_all_its_turns_go_to_one_worker():
    plan = plan_for(
        {"arrival": {"kind": "poisson", "rate": 20}, "duration": "2s"},
        multi_turn={"turns": 3, "think_time": "1s"},
    )
    parts = [plan.share(w, 2) for w in range(2)]
    sessions = [{r.session for r in p.requests} for p in parts]
    assert not sessions[0] & sessions[1]
    assert sessions[0] | sessions[1] == {r.session for r in plan.requests}
    assert sum(len(p.requests) for p in parts) == len(plan.requests)


def test_closed_loop_users_and_indexes_are_split_and_streams_are_distinct():
    plan = plan_for(
        {"arrival": {"kind": "concurrency", "users": 5, "think_time": "10ms"}, "requests": 100}
    )
    parts = [plan.share(w, 2) for w in range(2)]
    assert [p.closed_loop.users for p in parts] == [3, 2]
    assert [p.stride for p in parts] == [(0, 2), (1, 2)]
    assert all(p.planned_count == 100 for p in parts)  # one budget, shared by index
    draws = [[p.think_rng.random() for _ in range(3)] for p in parts]
    assert draws[0] != draws[1]  # workers seeded alike would think in lockstep
    again = plan.share(0, 2).think_rng
    assert [again.random() for _ in range(3)] == draws[0]  # deterministic, plan untouched
    assert plan.share(0, 1) is plan


def one_and_two_workers():
    """The same five requests recorded by one recorder, and by two workers whose windows open
    when each sends its first measured request (worker 0 at 150 ms, worker 1 at 650 ms)."""
    a = lambda: state(0, 0, 0, [100 * MS, 200 * MS, 300 * MS], warmup=True)  # noqa: E731
    b = lambda: state(1, 150 * MS, 150 * MS, [400 * MS, 500 * MS])  # noqa: E731
    c = lambda: state(2, 0, 0, [100 * MS, 250 * MS, 600 * MS], warmup=True)  # noqa: E731
    d = lambda: state(3, 650 * MS, 650 * MS, [700 * MS, 800 * MS])  # noqa: E731
    e = lambda: state(4, 0, 0, [100 * MS, 200 * MS, 700 * MS], warmup=True)  # noqa: E731
    one = Recorder(0, S, None, None)
    one.window.open_at(150 * MS)
    for st in (a(), b(), c(), d(), e()):
        one.finish(st)
    one.close()
    w0, w1 = Recorder(0, S, None, None), Recorder(0, S, None, None)
    w0.window.keep_before_start = w1.window.keep_before_start = True
    w0.window.open_at(150 * MS)
    w0.finish(a())
    w0.finish(b())
    w1.finish(c())  # before worker 1's window opened: counted nowhere, yet
    w1.window.open_at(650 * MS)
    w1.finish(d())
    w1.finish(e())  # counted from 650 ms: its 200 ms token was missed
    for w in (w0, w1):
        w.close_intervals()
    return one, [pickle.loads(pickle.dumps(w)) for w in (w0, w1)]  # as they reach the parent


def test_merged_workers_count_the_window_as_one_process_would():
    one, parts = one_and_two_workers()
    assert parts[1].window.tokens == 3  # d's 2, e's 700 ms token: its own, later, opening
    merged = merge(parts)
    merged.window.settle()
    assert merged.window.start == 150 * MS and merged.window.end == 800 * MS + 1
    # tokens in [150 ms, 800 ms]: a 200,300; b 400,500; c 250,600; d 700,800; e 200,700
    assert merged.window.tokens == one.window.tokens == 10
    assert merged.window.completions == one.window.completions == 5
    assert merged.window.input_tokens == one.window.input_tokens == 20  # b and d start inside
    assert (merged.completed, merged.warmup) == (one.completed, one.warmup) == (2, 3)
    for metric, h in one.histograms().items():
        assert merged.histograms()[metric].summary_ms() == h.summary_ms(), metric
    assert merged.closed == one.closed
    assert merged.window.token_bins == one.window.token_bins
    assert sorted(merged.timeline.done) == sorted(one.timeline.done)


def test_a_count_window_ends_with_the_last_measured_request_of_any_worker():
    w0, w1 = Recorder(0, S, 0, None), Recorder(0, S, 0, None)
    w0.finish(state(0, 0, 0, [10 * MS, 20 * MS]))
    w0.finish(state(1, 0, 0, [30 * MS, 2 * S], warmup=True))  # runs past the end
    w1.finish(state(2, 0, 0, [40 * MS, 900 * MS]))
    for w in (w0, w1):
        w.close_intervals()
    merged = merge([w0, w1])
    merged.window.settle()
    assert merged.window.end == 900 * MS + 1  # worker 1's, not worker 0's 20 ms
    assert merged.window.tokens == 5  # the warm-up request's 2 s token is after the end
    assert merged.window.completions == 2


def test_the_clients_facts_are_summed_then_described_once():
    from loadtest.backends import combine_facts
    from loadtest.config.backend_specs import OpenAISpec

    spec = OpenAISpec(base_url="http://h/v1", model="m", max_connections=4)
    parts = [
        {"http": {"connection_waits": 2, "connection_wait_ns": 3_000_000, "http_503": 1}},
        {"http": {"connection_waits": 1, "connection_wait_ns": 1_500_000}},
    ]
    facts = combine_facts(spec, {"fixed_output_via": "ignore_eos"}, parts)
    assert facts["http"] == {"connection_waits": 3, "connection_wait_ns": 4_500_000, "http_503": 1}
    [warning] = facts["warnings"]
    assert warning.startswith("3 requests waited for a free connection") and "4.5 ms" in warning


def test_other_backends_facts_add_up_and_keep_each_warning_once():
    from loadtest.backends import combine_facts
    from loadtest.config.backend_specs import NoopSpec

    parts = [{"n": 1, "ok": True, "warnings": ["a", "b"]}, {"n": 2, "ok": True, "warnings": ["b"]}]
    assert combine_facts(NoopSpec(), {}, parts) == {"n": 3, "ok": True, "warnings": ["a", "b"]}


def test_the_live_display_pools_the_workers_histograms():
    """Worker 0 saw fifty 1 ms TTFTs, worker 1 fifty 2 ms: the run's live p50 is 1 ms and its
    p99 2 ms (the worst worker's p50, 2 ms, would not be the run's)."""
    from loadtest.core.histogram import LatencyHistogram
    from loadtest.execution.live import LiveStats
    from loadtest.execution.workers import WorkerGroup

    def beat(ttft_us: int, sent: int) -> LiveStats:
        h = LatencyHistogram()
        for _ in range(50):
            h.record_us(ttft_us)
        return LiveStats(
            sent=sent, in_flight=1, completed=50, failed=0, histograms={"ttft": h.encode()}
        )

    async def heard() -> LiveStats:  # the heartbeats as they arrive, then the display's poll
        group = WorkerGroup(None, None, [None, None])  # type: ignore[arg-type]
        for i, (ttft_us, sent) in enumerate([(1000, 51), (2000, 52)]):
            group._poster(i)(("stats", beat(ttft_us, sent)))
        return group.stats()

    got = asyncio.run(heard())
    assert (got.sent, got.in_flight, got.completed) == (103, 2, 100)
    assert (got.latency.ttft_p50_ms, got.latency.ttft_p99_ms) == (1.0, 2.0)
    assert got.latency.itl_p50_ms is None and got.latency.itl_p99_ms is None  # no second token
