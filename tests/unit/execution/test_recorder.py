"""The recorder alone: hand-built request states, hand-computed latencies, windows and counts."""

from __future__ import annotations

import pytest

from loadtest.execution.recorder import Recorder
from loadtest.execution.request import RequestState
from loadtest.workload.requests import PlannedRequest

MS = 1_000_000
S = 1_000_000_000


def approx(ms: float):
    """hdrh reports a bucket's highest equivalent value: at most 0.1% high at 3 figures."""
    return pytest.approx(ms, rel=1e-3)


def state(index, intended, sent, stamps, *, done=None, error=None, warmup=False, admitted=None):
    req = PlannedRequest(index, intended, 10, len(stamps) or 1, index, None, warmup, True)
    st = RequestState(req, intended, sent, admitted_ns=admitted, stamps=list(stamps))
    st.done_ns = done if done is not None else (stamps[-1] if stamps else sent)
    st.error = error
    return st


def summary(rec: Recorder, metric: str) -> dict:
    return rec.histograms()[metric].summary_ms()


def test_latencies_of_one_request_by_hand():
    rec = Recorder(0, S, 0, 10 * S)
    # intended 100 ms, sent 101 ms, admitted 110 ms, tokens at 150, 170, 200 ms
    rec.finish(state(0, 100 * MS, 101 * MS, [150 * MS, 170 * MS, 200 * MS], admitted=110 * MS))
    rec.close()
    assert summary(rec, "ttft")["max"] == approx(50.0)  # 150 - 100 (from intended)
    assert summary(rec, "ttft_service")["max"] == approx(49.0)  # 150 - 101 (from sent)
    assert summary(rec, "itl")["min"] == approx(20.0) and summary(rec, "itl")["max"] == approx(30.0)
    assert summary(rec, "itl")["count"] == 2
    assert summary(rec, "tpot")["max"] == approx(25.0)  # (200 - 150) / 2
    assert summary(rec, "e2e")["max"] == approx(100.0)
    assert summary(rec, "queue")["max"] == approx(10.0)  # 110 - 100
    assert summary(rec, "dispatch_lag")["max"] == approx(1.0)
    assert rec.completed == 1 and rec.output_tokens_measured == 3


def test_warmup_and_failures_are_counted_not_recorded():
    rec = Recorder(0, S, 1 * S, 10 * S)
    rec.finish(state(0, 0, 0, [5 * MS], warmup=True))
    rec.finish(state(1, 2 * S, 2 * S, [], done=2 * S + 5 * MS, error="Timeout"))
    rec.finish(state(2, 3 * S, 3 * S, [], done=3 * S + 5 * MS, error="Timeout"))
    rec.finish(state(3, 4 * S, 4 * S, [4 * S + 10 * MS, 4 * S + 20 * MS]))
    rec.close()
    assert (rec.warmup, rec.failed, rec.completed) == (1, 2, 1)
    assert dict(rec.errors_by_type) == {"Timeout": 2}
    assert summary(rec, "ttft")["count"] == 1 and summary(rec, "ttft")["max"] == approx(10.0)


def test_an_interval_of_only_failures_does_not_drag_the_minimum_to_zero():
    rec = Recorder(0, S, 0, 10 * S)
    rec.finish(state(0, 0, 0, [], done=500 * MS, error="Boom"))  # interval 0: a failure only
    rec.finish(state(1, 2 * S, 2 * S, [2 * S + 40 * MS, 2 * S + 60 * MS]))
    rec.close()
    ttft, e2e, e2e_service = (summary(rec, m) for m in ("ttft", "e2e", "e2e_service"))
    assert ttft["min"] == approx(40.0) and e2e["min"] == approx(60.0)
    assert e2e["min"] >= e2e_service["min"]


def test_a_stream_across_intervals_counts_each_token_in_its_own_interval():
    """Tokens at 0.2, 0.9 s (interval 0), none in interval 1, 2.0 s (the boundary: interval
    2), 2.5 and 2.999 s (2), 3.1 s (3): 2, 0, 3, 1, and no empty interval made up."""
    rec = Recorder(0, S, 0, 10 * S)
    stamps = [200 * MS, 900 * MS, 2 * S, 2500 * MS, 2999 * MS, 3100 * MS]
    rec.finish(state(0, 0, 0, stamps))
    assert dict(rec.window.token_bins) == {0: 2, 2: 3, 3: 1}


def test_window_counts_only_tokens_stamped_inside_it():
    rec = Recorder(0, S, 1 * S, 3 * S)  # window [1 s, 3 s): offsets from t0
    # tokens at 0.5 s (before), 1.5 s and 2.5 s (inside), 3.5 s (after)
    rec.finish(state(0, 0, 0, [S // 2, 3 * S // 2, 5 * S // 2, 7 * S // 2], warmup=True))
    rec.finish(state(1, S, S, [3 * S // 2, 2 * S]))
    rec.close()
    assert rec.window.tokens == 2 + 2  # 1.5 s and 2.5 s of the first, 1.5 s and 2 s of the second
    assert rec.window.completions == 1  # the warmup request's completion is not the window's
