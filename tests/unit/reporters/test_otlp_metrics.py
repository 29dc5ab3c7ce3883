"""The live figures pushed as OTLP metrics through OpenTelemetry's own HTTP exporter to an OTLP
receiver (``tests/otlp_receiver.py``, decoded with opentelemetry-proto): names, attributes,
explicit-bucket histograms and counters, hand-computed."""

from __future__ import annotations

import pytest

from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.live import LiveStats, LiveTotals
from loadtest.reporters.live_metrics import BUCKETS_S
from loadtest.reporters.live_points import LivePoints

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytest.importorskip("opentelemetry.proto")

LABELS = ("chat", "sweep-1", "rate=4", "llama")


def test_a_finished_points_figures_reach_the_collector_under_genai_names(monkeypatch):
    from loadtest.reporters.otlp_metrics import MetricsPush
    from tests.otlp_receiver import OtlpReceiver, attributes

    receiver = OtlpReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    e2e = LatencyHistogram()
    for us in (2_000, 40_000, 3_000_000):  # 2 ms, 40 ms, 3 s
        e2e.record_us(us)
    totals = LiveTotals(completed=3, failed=2, output_tokens=96, input_tokens=300,
                        failed_by_type={"http_500": 2})  # fmt: skip
    totals.histograms["e2e"] = e2e
    points = LivePoints()
    points.done(LABELS, LiveStats(sent=5, totals=totals), {"valid": True, "steady": False})
    try:
        push = MetricsPush(points, interval=3600)  # none on the clock: only close()'s
        push.close()
        assert (push.pushed, push.failed) == (1, 0)
        got = {m.name: (svc, m) for svc, m in receiver.metrics()}
    finally:
        receiver.stop()
    service, duration = got["gen_ai.client.operation.duration"]
    assert service == "loadtest" and duration.unit == "s"
    (dp,) = duration.histogram.data_points
    assert list(dp.explicit_bounds) == list(BUCKETS_S)
    expected = [0] * (len(BUCKETS_S) + 1)
    for seconds in (0.002, 0.040, 3.0):  # each in the first bucket whose bound holds it
        expected[next(i for i, b in enumerate(BUCKETS_S) if seconds <= b)] += 1
    assert list(dp.bucket_counts) == expected and dp.count == 3
    assert dp.sum == pytest.approx(3.042, rel=1e-3)  # HDR's precision: 3 significant digits
    assert (dp.min, dp.max) == (pytest.approx(0.002, rel=1e-3), pytest.approx(3.0, rel=1e-3))
    assert attributes(dp) == {"loadtest.scenario": "chat", "loadtest.run": "sweep-1",
                              "loadtest.point": "rate=4", "gen_ai.request.model": "llama"}  # fmt: skip
    sums = {name: [(attributes(p), p.as_int) for p in got[name][1].sum.data_points]
            for name in ("loadtest.requests.sent", "loadtest.requests.completed",
                         "loadtest.requests.failed", "loadtest.tokens")}  # fmt: skip
    base = attributes(dp)
    assert sums["loadtest.requests.sent"] == [(base, 5)]
    assert sums["loadtest.requests.completed"] == [(base, 3)]
    assert sums["loadtest.requests.failed"] == [({**base, "error.type": "http_500"}, 2)]
    assert sorted(sums["loadtest.tokens"], key=lambda x: x[1]) == [
        ({**base, "gen_ai.token.type": "output"}, 96),
        ({**base, "gen_ai.token.type": "input"}, 300),
    ]
    assert got["loadtest.requests.sent"][1].sum.is_monotonic
    gauges = {name: got[name][1].gauge.data_points[0].as_int
              for name in ("loadtest.point.running", "loadtest.point.valid", "loadtest.point.steady")}  # fmt: skip
    assert gauges == {
        "loadtest.point.running": 0,
        "loadtest.point.valid": 1,
        "loadtest.point.steady": 0,
    }
    p99 = [p for p in got["loadtest.latency"][1].gauge.data_points
           if attributes(p)["loadtest.quantile"] == "0.99"]  # fmt: skip
    assert attributes(p99[0])["loadtest.metric"] == "e2e"
    assert p99[0].as_double == pytest.approx(3.0, rel=1e-3)


def test_a_collector_that_is_not_there_counts_the_push_as_failed_within_its_timeout(monkeypatch):
    from loadtest.reporters.otlp_metrics import MetricsPush

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # discard: refused
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    points = LivePoints()
    points.done(LABELS, LiveStats(sent=1, totals=LiveTotals(completed=1)), {})
    push = MetricsPush(points, interval=3600)
    push.close(timeout_s=30)
    assert (push.pushed, push.failed) == (0, 1)
