"""Exports for other tools: timeseries.csv, the HdrHistogram log, sweep_points.csv, and a sweep
table that fits 80 columns."""

from __future__ import annotations

import csv

from rich.console import Console

from loadtest.reporters import exports, sweep_report
from loadtest.results.model import RunMetrics, SweepDoc
from tests.conftest import MD1_BACKEND


def test_the_interval_histograms_read_back_through_hdrh_tooling(tmp_path, run_virtual_fn):
    from hdrh.histogram import HdrHistogram
    from hdrh.log import HistogramLogReader

    m = run_virtual_fn(
        {
            "name": "export",
            "backend": MD1_BACKEND,
            "workload": {"input_tokens": 1, "output_tokens": 1},
            "load": {"arrival": {"kind": "constant", "rate": 50}, "duration": "5s"},
        }
    )
    files = exports.files(RunMetrics.model_validate(m))
    assert [name for name, _ in files] == ["timeseries.csv", "histograms.hlog"]
    for _, write in files:
        write(tmp_path)
    rows = list(csv.DictReader((tmp_path / "timeseries.csv").open()))
    assert (
        len(rows) == len(m["timeseries"]["points"])
        and sum(int(r["completed"]) for r in rows) == 250
    )
    lines = (tmp_path / "histograms.hlog").read_text().splitlines()
    assert lines[0] == "#[Histogram log format version 1.3]"
    tagged = [x for x in lines if x.startswith("Tag=")]
    # hdrh's own reader takes every interval line; the ttft ones add up to the run's ttft count
    reader = HistogramLogReader(
        str(tmp_path / "histograms.hlog"), HdrHistogram(1, 3_600_000_000, 3)
    )
    read = 0
    while reader.get_next_interval_histogram() is not None:
        read += 1
    assert read == len(tagged)
    ttft = sum(
        HdrHistogram.decode(x.split(",", 4)[4].encode()).get_total_count()
        for x in tagged
        if x.startswith("Tag=ttft,")
    )
    assert ttft == m["latency_ms"]["ttft"]["count"] == 250


def test_sweep_points_csv_and_an_80_column_table(tmp_path):
    curve = [
        {"x": 2**k, "status": "ok", "steady": True, "output_tokens_per_s": 1234.5678 * k,
         "ttft_p50_ms": 12.3456, "ttft_p99_ms": 123.456, "itl_p50_ms": 9.87654,
         "itl_p99_ms": 19.8765, "e2e_p99_ms": 12345.678, "goodput_rps": 3.21}
        for k in range(1, 8)
    ]  # fmt: skip
    doc = SweepDoc.model_validate(
        {"axis": "backend.max_batch_size", "status": "ok", "curve": curve, "knee": 8,
         "frontier": [], "scenario_file": "s.yml", "points": [], "axes": {}}
    )  # fmt: skip
    paths = sweep_report.write(doc, tmp_path)
    assert [p.name for p in paths] == ["sweep.md", "sweep.html", "sweep_points.csv"]
    rows = list(csv.DictReader((tmp_path / "sweep_points.csv").open()))
    assert [r["x"] for r in rows] == ["2", "4", "8", "16", "32", "64", "128"]
    console = Console(width=80, record=True, color_system=None)
    sweep_report.render_terminal(doc, console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text  # no header or figure cut short
    for word in ("status", "steady", "tok/s", "TTFT", "ITL", "E2E", "p99", "good/s", "12346"):
        assert word in text  # a two-word header may take two lines, never an ellipsis
