"""Exports for other tools, rendered from metrics.json alone: the per-interval timeseries as CSV
and the interval histograms in HdrHistogram's log format (for HistogramLogProcessor, HdrHistogram
plotters and other hdrh tooling)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loadtest.core import atomic
from loadtest.results.model import RunMetrics

HLOG_VERSION = "1.3"
INTERVAL_COLUMNS = ("t_s", "completed", "failed", "output_tokens_per_s")
INTERVAL_METRICS = ("ttft", "itl", "e2e")


def files(metrics: RunMetrics) -> list[tuple[str, Callable[[Path], None]]]:
    """timeseries.csv and histograms.hlog, each a name and its writer (into a run directory):
    none for an unmeasured run."""
    ts = metrics.timeseries
    if not ts or not ts.points:
        return []
    columns = [
        *INTERVAL_COLUMNS,
        *(f"{m}_{p}_ms" for m in INTERVAL_METRICS for p in ("p50", "p99")),
    ]
    rows = [p.view() for p in ts.points]
    return [
        ("timeseries.csv", lambda d: atomic.write_csv(d / "timeseries.csv", rows, columns)),
        ("histograms.hlog", lambda d: atomic.write_text(d / "histograms.hlog", hlog_text(metrics))),
    ]


def hlog_text(metrics: RunMetrics) -> str:
    """The run's interval histograms as an HdrHistogram log (format 1.3): one tagged line per
    metric and interval, times in seconds from t0, values in microseconds (the max column in
    milliseconds, as HdrHistogram's own tools print it)."""
    from loadtest.core.histogram import LatencyHistogram

    assert metrics.timeseries is not None  # a measured run
    width = metrics.timeseries.interval_s
    lines = [
        f"#[Histogram log format version {HLOG_VERSION}]",
        f"#[loadtest run {metrics.name!s:.80}: values in microseconds; times from t0]",
        "#[BaseTime: 0.000 (seconds since epoch)]",
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"',
    ]
    for point in metrics.timeseries.points:
        for name in INTERVAL_METRICS:
            encoded = point.histograms.get(name)
            if not encoded:
                continue
            h = LatencyHistogram.decode(encoded)
            lines.append(
                f"Tag={name},{point.t_s:.3f},{width:.3f},"
                f"{h.hdr.get_max_value() / 1000:.3f},{encoded}"
            )
    return "\n".join(lines) + "\n"
