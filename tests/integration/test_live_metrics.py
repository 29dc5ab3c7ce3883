"""Live Prometheus metrics (``--metrics-port``), scraped by a real Prometheus (Debian's package,
started on loopback for this module, scraping every second): what it stored while the run ran
and after it ended is what metrics.json says. Outside CI a missing prometheus skips these; in
CI it fails them (CI installs it, ``.ci/run``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.reporters.live_metrics import BUCKETS_S
from tests import real_servers

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCENARIO = {
    "name": "live",
    "backend": {"kind": "sim", "max_concurrency": 4, "prefill_ms_per_token": 0.2,
                "decode_ms_per_token": 4},
    "workload": {"input_tokens": 32, "output_tokens": 16},
    "load": {"arrival": {"kind": "constant", "rate": 20}, "duration": "4s", "warmup": "1s"},
    "outputs": {"metrics_linger": "20s"},
}  # fmt: skip


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """Prometheus scraping two ports: one for a run in this process's way, one for workers."""
    if shutil.which("prometheus") is None and not os.path.exists("/usr/bin/prometheus"):
        how = "no prometheus: apt-get install prometheus"
        if os.environ.get("CI"):
            pytest.fail(how)
        pytest.skip(how)
    ports = [real_servers.free_port(), real_servers.free_port()]
    server = real_servers.start_prometheus(
        tmp_path_factory.mktemp("prometheus"), [f"127.0.0.1:{p}" for p in ports]
    )
    yield server, ports
    server.stop()


def _run(tmp_path, port: int, scenario: dict, *extra: str) -> dict:
    import yaml

    path = tmp_path / "s.yml"
    path.write_text(yaml.safe_dump(scenario))
    out = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "run", str(path), "--metrics-port", str(port), "-q",
         "-o", str(out), *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"live metrics at http://127.0.0.1:{port}/metrics" in r.stderr
    return json.loads((out / "metrics.json").read_text())


def _one(prom, promql: str) -> float:
    result = prom.query(promql)
    assert len(result) == 1, (promql, result)
    return float(result[0]["value"][1])


def _bounds_around(value_s: float) -> tuple[float, float]:
    """The histogram bucket holding ``value_s``: its lower and upper bound."""
    lower = max([0.0, *(b for b in BUCKETS_S if b < value_s)])
    upper = min(b for b in BUCKETS_S if b >= value_s)
    return lower, upper


@pytest.mark.parametrize("workers", [1, 2], ids=["in_process", "two_workers"])
def test_prometheus_scrapes_a_live_run_and_stores_what_metrics_json_says(
    prometheus, tmp_path, workers
):
    """While the run ran, Prometheus scraped it (several samples, the point running); after it
    ended, one more scrape took the final figures: the measured requests, tokens and the
    HDR TTFT p50 equal metrics.json's, and histogram_quantile over the buckets lands in the
    bucket that holds that p50. With two workers, the one endpoint serves their sum."""
    prom, ports = prometheus
    # the simulator is one server of its own: two workers drive the noop backend (no latency)
    backend = {"kind": "noop"} if workers > 1 else SCENARIO["backend"]
    m = _run(
        tmp_path, ports[workers - 1], {**SCENARIO, "backend": backend}, "--workers", str(workers)
    )
    sel = (
        f'{{run="run", scenario="live", job="loadtest", instance="127.0.0.1:{ports[workers - 1]}"}}'
    )

    def last(metric: str, extra: str = "") -> float:
        s = sel[:-1] + (f", {extra}" if extra else "") + "}"
        return _one(prom, f"last_over_time({metric}{s}[10m])")

    assert _one(prom, f"count_over_time(loadtest_requests_completed_total{sel}[10m])") >= 3
    assert _one(prom, f"max_over_time(loadtest_point_running{sel}[10m])") == 1.0
    assert last("loadtest_point_running") == 0.0  # the last scrape: the point had ended
    requests = m["requests"]
    assert last("loadtest_requests_completed_total") == requests["completed"] == 80
    assert last("loadtest_requests_sent_total") == requests["sent"] == 100
    assert last("loadtest_output_tokens_total") == requests["output_tokens"] == 80 * 16
    assert last("loadtest_input_tokens_total") == requests["input_tokens"] == 80 * 32
    assert last("loadtest_point_valid") == (1.0 if m["validity"]["valid"] else 0.0)
    p50_s = m["latency_ms"]["ttft"]["p50"] / 1000
    assert last("loadtest_latency_seconds", 'metric="ttft", quantile="0.5"') == pytest.approx(
        p50_s, abs=1e-9
    )
    assert last("loadtest_ttft_seconds_count") == m["latency_ms"]["ttft"]["count"] == 80
    estimate = _one(
        prom, f"histogram_quantile(0.5, last_over_time(loadtest_ttft_seconds_bucket{sel}[10m]))"
    )
    lower, upper = _bounds_around(p50_s)
    assert lower <= estimate <= upper


DASHBOARD = Path(__file__).parents[2] / "docker" / "grafana" / "loadtest-dashboard.json"


def test_the_shipped_dashboards_queries_read_a_live_run(prometheus, tmp_path):
    """Every query of docker/grafana/loadtest-dashboard.json, its variables set to the run,
    evaluated by the real Prometheus at an instant while the run was live: each parses, and
    each returns the run's series (all but the failures by type: none failed; and steadiness,
    judged live over 10 s): the validity so far, the backlog and the loop's lag among them."""
    prom, ports = prometheus
    _run(tmp_path, ports[0], {**SCENARIO, "name": "dash"})
    sel = f'{{scenario="dash", instance="127.0.0.1:{ports[0]}"}}'
    live_at = _one(prom, f"max_over_time(timestamp(loadtest_point_running{sel} == 1)[10m:1s])")
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    for expr in exprs:
        promql = expr.replace("$scenario", "dash").replace("$run", "run")
        result = prom.query(promql, at=live_at)
        # none failed; a run of 4 s is too short to judge steady so far (10 s of backlog)
        if "failed" in expr or "point_steady" in expr:
            continue
        assert result, promql
        assert all(r["metric"].get("scenario", "dash") == "dash" for r in result)
    for expr in (v["definition"] for v in dashboard["templating"]["list"] if "definition" in v):
        metric = expr.split("(", 1)[1].split("{", 1)[0].split(",", 1)[0]
        assert prom.query(f"last_over_time({metric}[10m])"), expr


def test_a_sweeps_points_are_series_of_their_own_labelled_by_their_parameter(prometheus, tmp_path):
    """One endpoint for the whole sweep: each point its own series (point="load.arrival.rate=
    5"), with that point's final figures and verdict."""
    import yaml

    prom, ports = prometheus
    path = tmp_path / "s.yml"
    scenario = {**SCENARIO, "name": "swept", "load": {**SCENARIO["load"], "duration": "2s"}}
    path.write_text(yaml.safe_dump(scenario))
    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "sweep", str(path), "--rates", "5,10",
         "--metrics-port", str(ports[1]), "-q", "-o", str(tmp_path / "sweep")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    sel = f'{{scenario="swept", run="sweep", instance="127.0.0.1:{ports[1]}"}}'
    got = {
        s["metric"]["point"]: float(s["value"][1])
        for s in prom.query(f"last_over_time(loadtest_requests_completed_total{sel}[10m])")
    }
    doc = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    want = {}
    for point in doc["points"]:
        m = json.loads((tmp_path / "sweep" / point["run_dir"] / "metrics.json").read_text())
        want[f"load.arrival.rate={point['params']['load.arrival.rate']}"] = m["requests"][
            "completed"
        ]
    assert got == want == {"load.arrival.rate=5": 10, "load.arrival.rate=10": 20}
    valid = prom.query(f"last_over_time(loadtest_point_valid{sel}[10m])")
    assert len(valid) == 2
