"""`loadtest report RUN --format vllm`: the run in `vllm bench serve`'s JSON layout."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from loadtest.cli import app
from loadtest.reporters.vllm_layout import FILE, vllm_layout
from loadtest.results.model import RunMetrics

SIM = {
    "name": "v",
    "backend": {"kind": "sim", "max_concurrency": 4, "decode_ms_per_token": 2},
    "workload": {"input_tokens": 10, "output_tokens": 5},
    "load": {"arrival": {"kind": "constant", "rate": 20}, "duration": "5s"},
}


def test_each_vllm_key_holds_loadtests_figure(run_virtual_fn):
    m = run_virtual_fn(SIM)
    out = vllm_layout(RunMetrics.model_validate(m))
    lat, t = m["latency_ms"], m["throughput"]
    assert (out["completed"], out["failed"]) == (m["requests"]["completed"], 0)
    assert out["output_throughput"] == t["output_tokens_per_s"]
    assert out["request_throughput"] == t["requests_per_s"]
    assert out["duration"] == t["window_s"] == 5.0
    for theirs, ours in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e")):
        assert out[f"mean_{theirs}_ms"] == lat[ours]["mean"]
        assert out[f"median_{theirs}_ms"] == out[f"p50_{theirs}_ms"] == lat[ours]["p50"]
        assert out[f"std_{theirs}_ms"] == lat[ours]["stddev"]
        assert out[f"p99_{theirs}_ms"] == lat[ours]["p99"]
        assert out[f"p99.9_{theirs}_ms"] == lat[ours]["p999"]
    # the simulator's gap between tokens is 2 ms, exactly, on the virtual clock
    assert out["median_itl_ms"] == 2.0 and out["median_tpot_ms"] == 2.0
    assert out["ttfts"] == [] and out["generated_texts"] == []  # answers are never kept


def test_report_writes_it_beside_each_run(tmp_path, run_virtual_fn):
    run_virtual_fn(SIM)  # the run directory: tmp_path / "run"
    r = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "--format", "vllm"])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "run" / FILE).read_text())
    assert doc["backend"] == "loadtest" and doc["completed"] > 0
    bad = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "--format", "csv"])
    assert bad.exit_code == 2
