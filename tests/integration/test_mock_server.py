"""`loadtest mock-server`: the package's own OpenAI-compatible server with no model, run as a
user runs it, and measured by loadtest: its set timing is what the run reports."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest


@pytest.fixture
def mock(request):
    """A mock server started with the test's flags; its /v1 URL."""
    args = getattr(request, "param", [])
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadtest", "mock-server", "--port", "0", *args],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stderr.readline()  # its first line says where it listens (or it died)
    found = re.search(r"(http://127\.0\.0\.1:\d+/v1)", line)
    assert found, line
    yield found.group(1)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 0  # Ctrl-C: a clean stop


def run(url: str, out: Path, *extra: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "run", "--url", url.removesuffix("/v1"), "--rate", "10",
         "--duration", "3s", "--warmup", "0", "--output-tokens", "10", "-o", str(out), "-q",
         "--no-report", *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode in (0, 3), r.stderr
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.parametrize("mock", [["--ttft-ms", "50", "--itl-ms", "5"]], indirect=True)
def test_a_run_measures_the_timing_it_was_set(mock, tmp_path):
    m = run(mock, tmp_path / "run")
    lat = m["latency_ms"]
    assert m["requests"]["completed"] >= 20 and m["requests"]["failed"] == 0
    assert 50 <= lat["ttft_service"]["p50"] < 50 + 40  # a busy machine adds, never takes away
    assert 5 <= lat["itl"]["p50"] < 5 + 10
    assert m["backend"]["name"] and m["scenario"]["backend"]["model"] == "mock-model"


def test_by_default_it_keeps_a_small_models_pace(mock, tmp_path):
    """50 ms to the first token, then 10 ms a token: a pace the client can stamp, so a first
    run on it is judged on the server's figures, not the client's."""
    lat = run(mock, tmp_path / "run")["latency_ms"]
    assert 50 <= lat["ttft_service"]["p50"] < 50 + 40
    assert 10 <= lat["itl"]["p50"] < 10 + 10


@pytest.mark.parametrize("mock", [["--step-ms", "20"]], indirect=True)
def test_a_batching_step_paces_every_stream(mock, tmp_path):
    lat = run(mock, tmp_path / "run")["latency_ms"]
    assert 20 <= lat["itl"]["p50"] < 20 + 15  # one token a step, whatever the streams


def test_embeddings_metrics_and_an_unknown_path(mock):
    req = urllib.request.Request(
        mock + "/embeddings", data=json.dumps({"input": ["a", "b"]}).encode(), method="POST"
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        doc = json.load(r)
    assert [d["index"] for d in doc["data"]] == [0, 1] and len(doc["data"][0]["embedding"]) == 8
    with urllib.request.urlopen(mock.removesuffix("/v1") + "/metrics", timeout=10) as r:
        assert "vllm:num_requests_running" in r.read().decode()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(mock + "/nothing", timeout=10)
    assert e.value.code == 404


def test_a_container_job_sets_the_common_flags_from_the_environment(mock, tmp_path):
    """``LOADTEST_*`` variables stand for the common flags (a container job's settings); each
    one used is named on stderr (never its value: a URL may carry a password), and a flag
    typed beats its variable."""
    env = {
        **os.environ,
        "LOADTEST_URL": mock.removesuffix("/v1"),
        "LOADTEST_RATE": "40",
        "LOADTEST_CONCURRENCY": "2",
        "LOADTEST_REQUESTS": "12",
        "LOADTEST_OUTPUT_TOKENS": "4",
        "LOADTEST_OUT": str(tmp_path / "from-env"),
        "LOADTEST_SET": "load.validity.max_stamp_delay_share=1000 outputs.requests_jsonl=true",
        "LOADTEST_QUIET": "1",
    }
    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "run", "--requests", "10", "--no-report"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode in (0, 3), r.stderr
    said = next(x for x in r.stderr.splitlines() if x.startswith("loadtest: from the environment"))
    assert "LOADTEST_URL (--url)" in said and "LOADTEST_SET (--set)" in said
    assert "LOADTEST_REQUESTS" not in said and mock not in said  # typed; no value shown
    m = json.loads((tmp_path / "from-env" / "metrics.json").read_text())
    load = m["scenario"]["load"]
    assert (load["arrival"]["rate"], load["max_in_flight"], load["requests"]) == (40.0, 2, 10)
    assert m["scenario"]["outputs"]["requests_jsonl"] is True
    bad = subprocess.run(
        [sys.executable, "-m", "loadtest", "run"],
        env={**env, "LOADTEST_RATE": "fast"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "LOADTEST_RATE" in bad.stderr
