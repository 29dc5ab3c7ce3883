"""The OpenAI-compatible HTTP backend against a real server: ``transformers serve`` on loopback
with a tiny model built here. No mock server stands in for it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import start_run

pytest.importorskip("aiohttp")
pytest.importorskip("fastapi")  # transformers[serving]

from loadtest.backends.openai.sse import SseParser
from loadtest.config.loading import load_scenario
from loadtest.session import run_scenario
from tests.real_servers import start_transformers_serve
from tests.tiny_model import CORPUS, build_tiny_model

LOOSE = {
    "max_dispatch_lag_p99": "1s",
    "max_loop_lag_p99": "1s",
    "max_stamp_delay_share": 1000.0,
}  # server and client share 2 cores here: the client is late, by design of the machine


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("served-llama"))


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    srv = start_transformers_serve(model_dir, tmp_path_factory.mktemp("server") / "serve.log")
    yield srv.url
    srv.kill()


def scenario(tmp_path: Path, backend: dict, load: dict, workload=None) -> Path:
    data = {
        "name": "served",
        "backend": {"kind": "openai", **backend},
        "workload": workload
        or {"input_tokens": {"dist": "uniform", "min": 4, "max": 24}, "output_tokens": 8},
        "load": {**load, "validity": LOOSE},
        "outputs": {"requests_jsonl": True},
    }
    path = tmp_path / "s.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "requests.jsonl").read_text().splitlines()]


def test_completions_stream_one_stamp_per_token(server, model_dir, tmp_path):
    path = scenario(
        tmp_path,
        {"base_url": server, "model": str(model_dir), "api": "completions"},
        {"arrival": {"kind": "concurrency", "users": 2}, "requests": 12, "warmup_requests": 2},
    )
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "ok", m["validity"]
    assert m["requests"]["completed"] == 12 and m["requests"]["failed"] == 0
    # judged for this backend too: two closed-loop users cannot build a backlog, and a window
    # this short (12 requests) has too few intervals to judge their latency's trend: unknown
    st = m["stability"]
    assert st["steady"] is None and st["open_loop"] is False
    assert "too few to judge the latency trend of a closed loop" in st["reasons"][0]
    assert (
        m["backend"]["fixed_output_via"] == "generation_config"
    )  # transformers serve refuses ignore_eos
    assert m["backend"]["server_model"].startswith(str(model_dir))
    for r in records(tmp_path / "run"):
        assert (
            r["output_tokens"] == 8 and len(r["token_ns"]) == 8
        )  # the fixed length, every token stamped
        assert r["token_ns"] == sorted(r["token_ns"])
        assert r["sent_ns"] < r["token_ns"][0] <= r["done_ns"]
    lat = m["latency_ms"]
    assert 0 < lat["ttft"]["p50"] < lat["e2e"]["p50"]
    assert lat["itl"]["count"] == 12 * 7 and lat["itl"]["max"] > 0
    assert m["requests"]["output_tokens"] == 12 * 8


def test_chat_with_a_dataset_of_messages(server, model_dir, tmp_path):
    data = tmp_path / "chats.jsonl"
    data.write_text(
        "\n".join(json.dumps({"messages": [{"role": "user", "content": t}]}) for t in CORPUS[:4])
    )
    path = scenario(
        tmp_path,
        {"base_url": server, "model": str(model_dir), "api": "chat"},
        {"arrival": {"kind": "poisson", "rate": 20}, "requests": 10, "warmup_requests": 1},
        {"dataset": str(data), "output_tokens": 6},
    )
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "ok", m["validity"]
    rows = records(tmp_path / "run")
    assert all(r["output_tokens"] == 6 and r["error"] is None for r in rows)
    # no first token after its request's end; equal where a busy server sent every token in one
    # chunk (p99 of nine requests is the largest, both then in one histogram bucket)
    assert all(r["ttft_ms"] <= r["e2e_ms"] for r in rows)
    assert m["latency_ms"]["ttft"]["p99"] <= m["latency_ms"]["e2e"]["p99"]


def test_multi_turn_sessions_against_transformers_serve(server, model_dir, tmp_path):
    """Each later turn carries the served model's own replies: its prompt, counted with the
    model's chat template, is longer than the first turn's by at least the reply."""
    path = scenario(
        tmp_path,
        {"base_url": server, "model": str(model_dir), "api": "chat"},
        {"arrival": {"kind": "concurrency", "users": 2}, "requests": 6},
        {"input_tokens": 8, "output_tokens": 4, "multi_turn": {"turns": 3, "think_time": "10ms"}},
    )
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "ok", m["validity"]
    s = m["sessions"]
    assert (s["started"], s["completed"], s["turns_sent"]) == (2, 2, 6)
    assert s["history"] == "the server's replies" and s["stand_in_replies"] == 0
    means = [t["input_tokens_mean"] for t in s["per_turn"]]
    assert means[0] + 8 + 4 <= means[1] and means[1] + 8 + 4 <= means[2]
    rows = records(tmp_path / "run")
    assert sorted((r["session"], r["turn"]) for r in rows) == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 1),
        (1, 2),
    ]


def test_the_api_key_is_sent_but_never_written(server, model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("LOADTEST_TEST_KEY", "sk-do-not-write-7f3a")
    path = scenario(
        tmp_path,
        {
            "base_url": server,
            "model": str(model_dir),
            "api": "completions",
            "api_key_env": "LOADTEST_TEST_KEY",
        },
        {"arrival": {"kind": "concurrency", "users": 1}, "requests": 2},
    )
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["backend"]["api_key"] == "from $LOADTEST_TEST_KEY"
    for f in (tmp_path / "run").iterdir():
        if f.suffix == ".parquet":  # compressed columns: read the table back
            import pyarrow.parquet as pq

            text = json.dumps(pq.read_table(f).to_pylist())
        else:
            text = f.read_text()
        assert "sk-do-not-write-7f3a" not in text


def test_a_server_without_a_profiler_flags_nothing_and_says_so(server, model_dir, tmp_path):
    """transformers serve has no /start_profile: the window says so, and no request is left
    out of the figures (they were, before, with no warning)."""
    path = scenario(
        tmp_path,
        {"base_url": server, "model": str(model_dir), "api": "completions"},
        {"arrival": {"kind": "concurrency", "users": 1}, "requests": 6},
    )
    data = yaml.safe_load(path.read_text())
    data["profile"] = {"requests": [1, 3]}
    path.write_text(yaml.safe_dump(data))
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "ok"
    p = m["profile"]
    assert p["profiler"].startswith("none: it did not start (POST /start_profile: HTTP 404")
    assert p["requests_flagged"] == m["requests"]["profiled"] == 0
    assert m["latency_ms"]["e2e"]["count"] == 6
    assert any("the profiler did not start" in w for w in m["validity"]["warnings"])


def test_a_wrong_endpoint_fails_the_start_with_the_reason(server, model_dir, tmp_path):
    path = scenario(
        tmp_path,
        {"base_url": server.replace("/v1", "/nope"), "model": str(model_dir)},
        {"arrival": {"kind": "concurrency", "users": 1}, "requests": 2},
    )
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "failed" and "HTTP 404" in m["backend"]["error"]


def test_server_death_mid_run_ends_with_partial_results(model_dir, tmp_path):
    srv = start_transformers_serve(model_dir, tmp_path / "serve.log")
    try:
        path = scenario(
            tmp_path,
            {"base_url": srv.url, "model": str(model_dir), "api": "completions"},
            {"arrival": {"kind": "poisson", "rate": 10}, "duration": "60s"},
        )
        run = start_run(path, tmp_path / "run", stderr=subprocess.STDOUT)
        # the probe, then some of the run's traffic answered (however long a busy machine
        # takes to start it), before the server dies
        log, deadline = tmp_path / "serve.log", time.monotonic() + 120
        while log.read_text(errors="replace").count("POST /v1/completions") < 6:
            assert time.monotonic() < deadline and run.poll() is None, "no traffic reached it"
            time.sleep(0.2)
        srv.kill()  # the server dies
        out, _ = run.communicate(timeout=120)
    finally:
        srv.kill()
    assert run.returncode == 4, out  # run failed: the backend is gone
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["status"] == "failed"
    assert "the server is down" in m["harness"]["failure"]
    assert m["requests"]["completed"] > 0  # what it measured before the death is kept
    # said where a user looks: invalid, with why, on the terminal and in the report
    assert m["validity"]["valid"] is False
    assert m["validity"]["reasons"][0].startswith("the run failed before its end: ")
    assert "the run failed before its end" in " ".join(out.split())
    assert "the run failed before its end" in (tmp_path / "run" / "report.md").read_text()
    errors = m["requests"]["errors_by_type"]
    assert errors.get("connect_error", 0) + errors.get("BackendError", 0) >= 1, errors


# -- pieces, with hand-computed answers ------------------------------------------------------


def test_sse_events_split_across_reads():
    """Each event with where in the read it ended: 6 = len(': 1}\\n\\n'), 17 = 6 + 11
    ('data: x\\r\\n\\r\\n'), the comment's 13 bytes skipped to 30, then 9 + 12 + 11 + 1 = 33
    of the two-line event: 63."""
    p = SseParser()
    assert p.feed(b'data: {"a"') == ([], [])
    assert p.feed(
        b": 1}\n\ndata: x\r\n\r\n: a comment\n\nevent: e\ndata: line1\ndata:line2\n\nda"
    ) == ([b'{"a": 1}', b"x", b"line1\nline2"], [6, 17, 63])
    assert p.pending == b"da"
    assert p.feed(b"ta: [DONE]\n\n") == ([b"[DONE]"], [12])


def test_secret_fields_are_masked_in_the_saved_scenario(tmp_path):
    path = tmp_path / "s.yml"
    path.write_text(
        "name: x\nbackend:\n  kind: openai\n  base_url: http://user:pw-1234@h/v1\n  model: m\n"
        "  headers: {' Authorization ': Bearer sk-12345, X-Trace: t1, x_api_key: k-6789}\n"
        "  extra_body: {temperature: 0, session_token: s-0000}\n"
        "workload: {input_tokens: 4, output_tokens: 4}\n"
        "load: {arrival: {kind: concurrency, users: 1}, requests: 1}\n"
    )
    loaded = load_scenario(path)
    backend = loaded.scenario.public_dump()["backend"]
    assert backend["base_url"] == "http://***@h/v1"
    assert backend["headers"] == {" Authorization ": "***", "X-Trace": "t1", "x_api_key": "***"}
    assert backend["extra_body"] == {"temperature": 0, "session_token": "***"}
    assert set(loaded.scenario.backend.secret_values()) >= {
        "user:pw-1234",
        "pw-1234",
        "Bearer sk-12345",
        "sk-12345",
        "k-6789",
        "s-0000",
    }
