"""The live figures as OpenTelemetry metrics, pushed by OTLP (``outputs.otel``; the ``otel``
extra): the same points the Prometheus endpoint serves (``live_points``), read every
``OTEL_METRIC_EXPORT_INTERVAL`` (ms; 5 s unless set) on a thread of their own, and once more
after the last point with its final figures and verdicts.

Names follow OpenTelemetry's GenAI client conventions where one exists: end-to-end latency is
``gen_ai.client.operation.duration``, TTFT ``gen_ai.client.operation.time_to_first_chunk``, ITL
``gen_ai.client.operation.time_per_output_chunk`` (histograms, seconds, explicit buckets as the
Prometheus endpoint's); the rest are ``loadtest.*``. Counters are cumulative from each point's
start. Where they go: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._METRICS_ENDPOINT``) and the
other standard variables, read by OpenTelemetry's exporter.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

from loadtest.core._version import __version__
from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.live import LiveTotals
from loadtest.reporters.live_metrics import BOUNDS_US, BUCKETS_S, PERCENTS, QUANTILES
from loadtest.reporters.live_points import LivePoint, LivePoints

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import (
        HistogramDataPoint,
        MetricExporter,
        MetricsData,
        NumberDataPoint,
    )
    from opentelemetry.sdk.resources import Resource

DEFAULT_INTERVAL_S = 5.0
CLOSE_TIMEOUT_S = 15.0
# loadtest's latency name -> its OpenTelemetry histogram (GenAI's where it has one)
HISTOGRAM_NAMES = {
    "e2e": "gen_ai.client.operation.duration",
    "ttft": "gen_ai.client.operation.time_to_first_chunk",
    "itl": "gen_ai.client.operation.time_per_output_chunk",
    "tpot": "loadtest.time_per_output_token",
}


def interval_s() -> float:
    """Seconds between pushes: ``OTEL_METRIC_EXPORT_INTERVAL`` (ms), else 5 s (the standard's
    default of a minute is longer than many a load test)."""
    raw = os.getenv("OTEL_METRIC_EXPORT_INTERVAL", "")
    try:
        return max(0.1, float(raw) / 1000.0) if raw else DEFAULT_INTERVAL_S
    except ValueError:
        return DEFAULT_INTERVAL_S


def metric_exporter() -> MetricExporter:
    """The OTLP metric exporter the environment configures (as ``core.otlp.span_exporter``)."""
    from loadtest.core.otlp import EXTRA_HINT, protocol

    kind = protocol()
    try:
        if kind == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter,
            )
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )
    except ImportError as exc:
        raise ImportError(f"outputs.otel needs OpenTelemetry's SDK: {EXTRA_HINT}") from exc
    exporter: MetricExporter = OTLPMetricExporter()
    return exporter


class MetricsPush:
    """Pushes ``points`` every ``interval`` until ``close()``, which pushes the final figures."""

    def __init__(
        self,
        points: LivePoints,
        exporter: MetricExporter | None = None,
        interval: float | None = None,
    ) -> None:
        from loadtest.core.otlp import resource

        self.points = points
        self._exporter = exporter if exporter is not None else metric_exporter()
        self._resource = resource()
        self._interval = interval_s() if interval is None else interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loadtest-otlp", daemon=True)
        self._thread.start()
        self.pushed = self.failed = 0

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """The final figures pushed (within ``timeout_s``), the exporter stopped."""
        self._stop.set()
        self._thread.join(timeout_s)
        try:
            self._exporter.shutdown()
        except Exception:  # its own failure to stop: the pushes are counted
            pass

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.push()
        self.push()

    def push(self) -> None:
        """One export of every point's figures now."""
        from opentelemetry.sdk.metrics.export import MetricExportResult

        points = self.points.read()
        if not points:
            return
        try:
            result = self._exporter.export(metrics_data(points, self._resource, time.time_ns()))
        except Exception:  # the exporter logs why
            result = MetricExportResult.FAILURE
        if result == MetricExportResult.SUCCESS:
            self.pushed += 1
        else:
            self.failed += 1


def metrics_data(points: list[LivePoint], resource: Resource, now_unix_ns: int) -> MetricsData:
    """Every point's figures as one OTLP export."""
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Gauge,
        Histogram,
        Metric,
        MetricsData,
        ResourceMetrics,
        ScopeMetrics,
        Sum,
    )
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    series = _Series(now_unix_ns)
    for point in points:
        series.add(point)
    cumulative = AggregationTemporality.CUMULATIVE
    metrics = [
        *(Metric(n, None, "1", Sum(p, cumulative, True)) for n, p in series.sums.items()),
        *(Metric(n, None, _unit(n), Gauge(p)) for n, p in series.gauges.items()),
        *(Metric(n, None, "s", Histogram(p, cumulative)) for n, p in series.histograms.items()),
    ]
    scope = InstrumentationScope("loadtest", __version__)
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, metrics, "")], "")])


class _Series:
    """An export's data points by metric name, as each point adds its own."""

    def __init__(self, now: int) -> None:
        self.now = now
        self.sums: dict[str, list[NumberDataPoint]] = {}
        self.gauges: dict[str, list[NumberDataPoint]] = {}
        self.histograms: dict[str, list[HistogramDataPoint]] = {}

    def add(self, point: LivePoint) -> None:
        scenario, run, name, model = point.labels
        base = {"loadtest.scenario": scenario, "loadtest.run": run, "loadtest.point": name}
        if model:
            base["gen_ai.request.model"] = model
        number = _Numbers(base, point.started_unix_ns, self.now)
        sums, gauges = self.sums, self.gauges
        number.add(gauges, "loadtest.point.running", 1 if point.source is not None else 0)
        for verdict, value in point.verdicts.items():
            number.add(gauges, f"loadtest.point.{verdict}", 1 if value else 0)
        s = point.last
        if s is None:
            return
        totals = s.totals or LiveTotals()
        number.add(sums, "loadtest.requests.sent", s.sent)
        number.add(sums, "loadtest.requests.completed", totals.completed)
        for kind, n in sorted(totals.failed_by_type.items()):
            number.add(sums, "loadtest.requests.failed", n, **{"error.type": kind})
        number.add(sums, "loadtest.tokens", totals.input_tokens, **{"gen_ai.token.type": "input"})
        number.add(sums, "loadtest.tokens", totals.output_tokens, **{"gen_ai.token.type": "output"})
        number.add(gauges, "loadtest.requests.in_flight", s.in_flight)
        if totals.backlog is not None:
            number.add(gauges, "loadtest.requests.backlog", totals.backlog)
        if point.source is not None:
            for metric, rate in zip(("offered", "delivered"), point.rate_now):
                if rate is not None:
                    number.add(gauges, f"loadtest.rate.{metric}", rate)
        for metric, h in totals.histograms.items():
            if h.count:
                self._latency(number, metric, h)

    def _latency(self, number: _Numbers, metric: str, h: LatencyHistogram) -> None:
        """A latency's HDR quantiles as gauges, and (where it has a name) its histogram."""
        from opentelemetry.sdk.metrics.export import HistogramDataPoint

        under, sum_us, values = h.digest(BOUNDS_US, (0.0, *PERCENTS, 100.0))
        low_ms, *quantiles_ms, high_ms = values
        for q, v in zip(QUANTILES, quantiles_ms):
            number.add(self.gauges, "loadtest.latency", v / 1000.0, **{
                "loadtest.metric": metric, "loadtest.quantile": f"{q:g}",
            })  # fmt: skip
        histogram = HISTOGRAM_NAMES.get(metric)
        if histogram is not None:
            counts = [b - a for a, b in zip([0, *under], [*under, h.count])]
            self.histograms.setdefault(histogram, []).append(
                HistogramDataPoint(number.attrs, number.start, self.now, h.count, sum_us / 1e6,
                                   counts, BUCKETS_S, low_ms / 1000.0, high_ms / 1000.0)
            )  # fmt: skip


class _Numbers:
    """Adds a point's number data points (its attributes, and any more, at its times)."""

    def __init__(self, attrs: dict[str, str], start: int, now: int) -> None:
        self.attrs, self.start, self.now = attrs, start, now

    def add(
        self, into: dict[str, list[NumberDataPoint]], metric: str, value: float, **extra: str
    ) -> None:
        from opentelemetry.sdk.metrics.export import NumberDataPoint

        point = NumberDataPoint({**self.attrs, **extra}, self.start, self.now, value)
        into.setdefault(metric, []).append(point)


def _unit(name: str) -> str:
    return "s" if name == "loadtest.latency" else "1/s" if name.startswith("loadtest.rate") else "1"
