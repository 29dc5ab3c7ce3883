"""``load.workers``: several client processes, one plan, one t0, one merged result."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from typer.testing import CliRunner

from loadtest.cli import app
from loadtest.config.loading import load_scenario
from loadtest.core import exit_codes
from loadtest.session import run_scenario
from tests.conftest import write_scenario
from tests.stub_openai import StubServer

pytestmark = pytest.mark.integration
LENIENT = {"max_dispatch_lag_p99": "1s", "max_loop_lag_p99": "1s"}  # a busy CI machine


def noop(tmp_path, workers: int, load: dict | None = None, name: str = "s.yml", **more):
    load = load or {"arrival": {"kind": "poisson", "rate": 200}, "duration": "1s", "warmup": "0.2s"}
    return write_scenario(
        tmp_path,
        {
            "name": "w",
            "backend": {"kind": "noop"},
            "workload": {"input_tokens": 8, "output_tokens": 4},
            "load": {**load, "workers": workers, "validity": LENIENT},
            "telemetry": {"gpu": False},
            **more,
        },
        name,
    )


def test_two_workers_send_exactly_the_plan_one_sends(tmp_path):
    one = run_scenario(load_scenario(noop(tmp_path, 1, name="a.yml")), tmp_path / "one").metrics
    two = run_scenario(load_scenario(noop(tmp_path, 2, name="b.yml")), tmp_path / "two").metrics
    assert two["status"] == "ok", two["validity"]
    for key in ("planned", "sent", "completed", "warmup", "output_tokens", "input_tokens"):
        assert two["requests"][key] == one["requests"][key], key
    assert one["workers"] is None and len(two["workers"]) == 2
    assert sum(w["sent"] for w in two["workers"]) == two["requests"]["sent"]
    assert sum(w["completed"] for w in two["workers"]) == two["requests"]["completed"]
    assert abs(two["workers"][0]["sent"] - two["workers"][1]["sent"]) <= 1  # every other arrival
    assert two["window"] == {**two["window"], "start_s": 0.2, "length_s": 1.0}
    assert two["throughput"]["output_tokens_in_window"] == pytest.approx(
        one["throughput"]["output_tokens_in_window"], abs=8
    )  # the same arrivals; a request at the window's edge may land either side
    assert two["backend"]["workers"] == 2


def test_workers_share_one_budget_of_closed_loop_requests(tmp_path):
    load = {
        "arrival": {"kind": "concurrency", "users": 3, "think_time": "1ms"},
        "requests": 300,
        "warmup_requests": 30,
    }
    path = noop(tmp_path, 2, load, outputs={"requests_jsonl": True})
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "ok", m["validity"]
    assert (m["requests"]["completed"], m["requests"]["warmup"]) == (300, 30)
    assert [w["sent"] for w in m["workers"]] == [165, 165]  # indexes 0, 2, 4.. and 1, 3, 5..
    # the window opens at the first measured send of either worker and ends with the last
    # measured request: every token stamped in it counts, a warm-up request's too
    records = [json.loads(line) for line in (tmp_path / "run" / "requests.jsonl").open()]
    measured = [r for r in records if not r["warmup"]]
    start = min(r["intended_ns"] for r in measured)
    end = max(r["done_ns"] for r in measured) + 1
    in_window = sum(start <= t < end for r in records for t in r["token_ns"])
    assert m["throughput"]["output_tokens_in_window"] == in_window >= 4 * 300


def test_each_request_reaches_the_server_once(tmp_path):
    with StubServer() as stub:
        path = write_scenario(
            tmp_path,
            {
                "name": "served",
                "backend": {
                    "kind": "openai",
                    "base_url": stub.url,
                    "model": "stub",
                    "tokenizer": None,
                },
                "workload": {"input_tokens": 8, "output_tokens": 3},
                "load": {
                    "arrival": {"kind": "poisson", "rate": 40},
                    "duration": "1.5s",
                    "workers": 2,
                    "validity": LENIENT,
                },
                "outputs": {"requests_jsonl": True},
                "telemetry": {"gpu": False},
            },
        )
        m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "ok", m["validity"]
    # each worker's start asks for one short generation (the fixed-length probe)
    assert len(stub.bodies) - 2 == m["requests"]["sent"] == m["requests"]["planned"]
    records = [json.loads(line) for line in (tmp_path / "run" / "requests.jsonl").open()]
    assert sorted(r["index"] for r in records) == list(range(m["requests"]["planned"]))
    assert len({r["response_id"] for r in records}) == len(records)


def test_a_lost_worker_fails_the_run_and_keeps_what_the_others_measured(tmp_path):
    load = {"arrival": {"kind": "poisson", "rate": 100}, "duration": "20s"}
    loaded = load_scenario(noop(tmp_path, 2, load))

    def kill_one():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(multiprocessing.active_children()) < 2:
            time.sleep(0.1)
        time.sleep(2.0)  # both running by now
        os.kill(multiprocessing.active_children()[0].pid, signal.SIGKILL)

    threading.Thread(target=kill_one, daemon=True).start()
    started = time.monotonic()
    m = run_scenario(loaded, tmp_path / "run").metrics
    assert time.monotonic() - started < 15  # not the planned 20 s
    assert m["status"] == "failed"
    assert "was lost" in m["harness"]["failure"] and "exited (code -9)" in m["harness"]["failure"]
    statuses = sorted(w["status"] for w in m["workers"])
    assert statuses == ["failed", "lost"]
    kept = next(w for w in m["workers"] if w["status"] == "failed")
    # its count depends on how soon the workers started on a busy machine; that it is kept whole
    # is the point
    assert kept["completed"] > 0 and m["requests"]["completed"] == kept["completed"]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "failed"


def test_ctrl_c_reaches_the_parent_only_and_stops_every_worker(tmp_path):
    load = {"arrival": {"kind": "poisson", "rate": 100}, "duration": "30s"}
    path = noop(tmp_path, 2, load)
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadtest", "run", str(path), "--out", str(tmp_path / "run"), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(5)
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole process group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["status"] == "interrupted" and m["interrupted_by"] == "SIGINT"
    assert [w["status"] for w in m["workers"]] == ["interrupted", "interrupted"]
    assert 0 < m["window"]["length_s"] < 25 and m["requests"]["completed"] > 0


@pytest.mark.parametrize(
    "backend, said",
    [
        ({"kind": "sim"}, "one queue in one process"),
        ({"kind": "transformers", "model": "dummy:llama-3.2-1b"}, "one model in one process"),
    ],
)
def test_a_backend_that_cannot_be_shared_is_refused_by_name(tmp_path, backend, said):
    path = write_scenario(
        tmp_path,
        {
            "name": "w",
            "backend": backend,
            "load": {"arrival": {"kind": "burst"}, "requests": 4, "workers": 2},
        },
    )
    r = CliRunner().invoke(app, ["validate", str(path)])
    assert r.exit_code == exit_codes.USAGE, r.output
    assert "scenario.yml:" in r.output and "load.workers" in r.output and said in r.output


def test_traced_workers_each_export_their_own_requests_spans(tmp_path, monkeypatch):
    """``outputs.otel`` with two worker processes: each exports the spans of the requests it
    sent (labelled with its index) to the collector, every sent request once, and the
    result comes back whole (the recorder's span hook does not travel with it)."""
    pytest.importorskip("opentelemetry.proto")
    from tests.otlp_receiver import OtlpReceiver, attributes

    receiver = OtlpReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    try:
        load = {"arrival": {"kind": "poisson", "rate": 100}, "requests": 60}
        m = run_scenario(
            load_scenario(noop(tmp_path, 2, load, outputs={"otel": True})), tmp_path / "run"
        ).metrics
        spans = [s for service, s in receiver.spans() if service == "loadtest"]
    finally:
        receiver.stop()
    assert m["status"] == "ok", m["validity"]
    assert len(spans) == m["requests"]["sent"] == 60
    by_worker = {w: sum(attributes(s)["loadtest.worker"] == w for s in spans) for w in (0, 1)}
    assert by_worker == {w["index"]: w["sent"] for w in m["workers"]}
    assert len({attributes(s)["loadtest.request.index"] for s in spans}) == 60
