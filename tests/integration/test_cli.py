"""End to end through the CLI: exit codes, bad input (property 12), interrupts and files (11)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import LENIENT, start_run

SIM_DEMO = {
    "name": "sim-demo",
    "seeds": {"schedule": 1, "prompts": 2, "lengths": 3},
    "backend": {
        "kind": "sim",
        "max_concurrency": 4,
        "prefill_ms_per_token": 0.01,
        "decode_ms_per_token": 1,
    },
    "workload": {"input_tokens": 100, "output_tokens": {"dist": "uniform", "min": 4, "max": 8}},
    "load": {
        "arrival": {"kind": "poisson", "rate": 40},
        "duration": "1s",
        "warmup": "200ms",
        "validity": LENIENT,
    },
}


def cli(*args, timeout=60, **kw):
    return subprocess.run(
        [sys.executable, "-m", "loadtest", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def write(tmp_path: Path, data, name="s.yml") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return p


def test_run_writes_metrics_at_exactly_out(tmp_path):
    out = tmp_path / "exactly" / "here"
    r = cli("run", write(tmp_path, SIM_DEMO), "--out", out, "--quiet")
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "ok" and m["schema"] == "loadtest/metrics/v1"
    # every run writes its reports beside the result (--no-report: metrics.json only)
    assert (out / "report.md").exists() and (out / "report.html").exists()
    bare = cli("run", write(tmp_path, SIM_DEMO), "--out", tmp_path / "bare", "-q", "--no-report")
    assert bare.returncode == 0 and not (tmp_path / "bare" / "report.html").exists()
    for key in (
        "scenario",
        "environment",
        "requests",
        "latency_ms",
        "throughput",
        "validity",
        "histograms",
        "p50_ms",
        "p95_ms",
        "p99_ms",
        "peak_mem_mb",
        "commit",
        "output_tokens_per_s",
    ):
        assert key in m
    assert set(m["latency_ms"]) == {
        "ttft",
        "ttft_service",
        "itl",
        "tpot",
        "e2e",
        "e2e_service",
        "queue",
        "dispatch_lag",
    }
    assert m["environment"]["seeds"] == {"schedule": 1, "prompts": 2, "lengths": 3}
    assert not list(out.glob(".*.tmp"))  # no temp files left behind


def test_set_overrides_and_requests_jsonl(tmp_path):
    out = tmp_path / "run"
    r = cli(
        "run",
        write(tmp_path, SIM_DEMO),
        "--out",
        out,
        "-q",
        "--set",
        "load.arrival.rate=20",
        "--set",
        "outputs.requests_jsonl=true",
    )
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "metrics.json").read_text())
    assert m["scenario"]["load"]["arrival"]["rate"] == 20.0
    rows = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == m["requests"]["sent"]
    assert all(len(r["token_ns"]) == r["output_tokens"] for r in rows)


def test_sla_fail_exits_1_and_inconclusive_exits_3(tmp_path):
    failing = {**SIM_DEMO, "sla": {"ttft_p50": "1us"}}
    assert cli("run", write(tmp_path, failing), "-o", tmp_path / "a", "-q").returncode == 1
    thin = {**SIM_DEMO, "sla": {"ttft_p99": "10s"}}  # ~40 samples: too few for a p99 claim
    r = cli("run", write(tmp_path, thin), "-o", tmp_path / "b", "-q")
    assert r.returncode == 3 and "INCONCLUSIVE" in r.stdout


BAD_CASES = {
    "yaml": ("name: x\nload:\n  arrival: {kind: poisson\n  rate: 5\n", ":4:", "YAML error"),
    "unknown key": (
        "name: x\nload:\n  arrival: {kind: poisson, rate: 5}\n  duration: 1s\n  durration: 2s\n",
        ":5:",
        "load.durration",
    ),
    "negative rate": (
        "name: x\nload:\n  arrival: {kind: poisson, rate: -5}\n  duration: 1s\n",
        ":3:",
        "load.arrival.rate",
    ),
    "percentile": (
        "name: x\nload: {arrival: {kind: burst}, requests: 1}\nsla:\n  ttft_p101: 5ms\n",
        ":4:",
        "sla.ttft_p101",
    ),
    "wrong type": (
        "name: x\nload:\n  arrival: {kind: constant, rate: 5}\n  requests: many\n",
        ":4:",
        "load.requests",
    ),
    "missing model": (
        "name: x\nbackend: {kind: transformers, model: ./nowhere}\nload: {arrival: {kind: burst}, requests: 1}\n",
        ":2:",
        "backend.model",
    ),
}


def test_bad_input_exits_2_fast_with_file_line_and_field(tmp_path):
    for label, (text, line, field) in BAD_CASES.items():
        path = write(tmp_path, text, f"{label.replace(' ', '_')}.yml")
        t = time.monotonic()
        r = cli("run", path)
        elapsed = time.monotonic() - t
        assert r.returncode == 2, (label, r.stderr)
        assert f"{path}{line}" in r.stderr and field in r.stderr, (label, r.stderr)
        assert elapsed < 5, label  # the process, Python start-up included; the check itself is ms


def test_validation_never_imports_torch(tmp_path):
    path = write(tmp_path, BAD_CASES["missing model"][0])
    code = (
        "import sys; from loadtest.config.loading import load_scenario\n"
        f"try: load_scenario({str(path)!r})\nexcept Exception: pass\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_validate_command(tmp_path):
    good = write(tmp_path, SIM_DEMO, "good.yml")
    assert cli("validate", good).returncode == 0
    bad = write(tmp_path, BAD_CASES["unknown key"][0], "bad.yml")
    r = cli("validate", good, bad)
    assert r.returncode == 2 and "durration" in r.stderr


def test_ctrl_c_writes_partial_result_and_exits_130(tmp_path):
    long_run = {
        **SIM_DEMO,
        "load": {
            "arrival": {"kind": "constant", "rate": 50},
            "duration": "60s",
            "validity": LENIENT,
        },
    }
    out = tmp_path / "run"
    proc = start_run(write(tmp_path, long_run), out)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "interrupted" and m["requests"]["completed"] > 0


def test_ctrl_c_at_a_terminal_says_one_line_not_the_engines_traceback(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group, the local model's engine process
    too: the harness alone answers it (one line, the partial result, 130); the engine says
    nothing. Signalled once the run's first progress line is out (the model loaded)."""
    import os

    path = write(
        tmp_path,
        {
            "name": "ctrl-c",
            "backend": {"kind": "transformers", "model": "dummy:tiny-llama", "device": "cpu"},
            "workload": {"input_tokens": 16, "output_tokens": 16},
            "load": {"arrival": {"kind": "poisson", "rate": 2}, "duration": "60s",
                     "validity": LENIENT},
        },
    )  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadtest", "run", str(path), "-o", str(tmp_path / "run")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        while line := proc.stderr.readline():  # bounded: the run ends by itself within 2 min
            if line.startswith("progress:"):
                break
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "SIGINT: stopping and writing the partial result" in err
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "interrupted"


def test_report_rerenders_from_metrics_json(tmp_path):
    out = tmp_path / "run"
    assert cli("run", write(tmp_path, SIM_DEMO), "-o", out, "-q").returncode == 0
    r = cli("report", out)
    assert r.returncode == 0 and (out / "report.md").exists()
    assert "## Latency (ms)" in (out / "report.md").read_text()


def test_watcher_is_watched_blocking_client_marks_run_invalid(tmp_path):
    """A client that blocks its own event loop falls behind: invalid, with the reason (property 4)."""
    code = f"""
import asyncio, time, json
from loadtest.backends import REGISTRY
from loadtest.backends.noop import NoopBackend
class Blocking(NoopBackend):
    async def submit(self, req, prompt_ids):
        time.sleep(0.02)  # holds the event loop: nothing else can be dispatched meanwhile
        async for ev in super().submit(req, prompt_ids):
            yield ev
import loadtest.backends.noop as noop
noop.NoopBackend = Blocking
from loadtest.config.loading import load_scenario
from loadtest.session import run_scenario
import yaml, pathlib
p = pathlib.Path({str(tmp_path)!r}) / "w.yml"
p.write_text(yaml.safe_dump({{"name": "w", "backend": {{"kind": "noop"}}, "workload": {{"input_tokens": 1, "output_tokens": 1}},
    "load": {{"arrival": {{"kind": "constant", "rate": 200}}, "duration": "1s"}}}}))
m = run_scenario(load_scenario(p), pathlib.Path({str(tmp_path)!r}) / "wrun").metrics
print(json.dumps({{"status": m["status"], "reasons": m["validity"]["reasons"], "e2e_p99": m["latency_ms"]["e2e"]["p99"]}}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "invalid"
    assert any("dispatch lag" in reason for reason in out["reasons"])
    assert out["e2e_p99"] > 100  # latencies still include the delay


def test_an_offline_batch_size_sweep_sizes_each_point_by_full_batches_and_reports_progress(
    tmp_path, tiny_model_dir
):
    data = {
        "name": "offline",
        "backend": {
            "kind": "transformers",
            "model": str(tiny_model_dir),
            "device": "cpu",
            "mode": "static",
            "max_batch_size": 4,
            "max_wait_ms": 50,
            "batch_buckets": True,  # sizes that follow max_batch_size from point to point
        },
        "workload": {"input_tokens": 8, "output_tokens": 4},
        "load": {
            "arrival": {"kind": "burst"},
            "requests": 256,
            "warmup_requests": 32,
            # a burst of 2 or 6 spans a few ms: a busy machine's stall of the sender alone
            # would make it invalid, and validity is not what this test is about
            "validity": {**LENIENT, "max_burst_send_share": 1.0},
        },
        "telemetry": {"gpu": False},
    }
    out = tmp_path / "sw"
    r = cli(
        "sweep",
        write(tmp_path, data),
        "--batch-sizes",
        "1,3",
        "--batches-per-point",
        "2",
        "-o",
        out,
        "-q",
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "sweep.json").read_text())
    assert "2 full batches" in doc["point_sizing"]
    # the scenario's 256 requests would take batch 1 a long time; 2 batches of each size instead
    got = [
        (p["metrics"]["requests"]["completed"], p["metrics"]["requests"]["warmup"])
        for p in doc["points"]
    ]
    assert got == [(2, 1), (6, 3)]
    # the engine took the new max_batch_size live: its buckets, warm-up and report followed
    assert [
        (p["metrics"]["backend"]["batch_buckets"], p["metrics"]["backend"]["warmup_batch_sizes"])
        for p in doc["points"]
    ] == [([1], [1]), ([1, 2, 3], [1, 2, 3])]
    assert "sweep: point 1/2" in r.stderr and "sweep: point 2/2" in r.stderr and "left" in r.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_one_command_from_a_url_discovers_the_model_and_saves_a_reproducible_scenario(tmp_path):
    """``loadtest run --url``: no scenario file; the model from /v1/models; the equivalent
    scenario written out, and that file runs the same load again."""
    pytest.importorskip("aiohttp")
    from tests.real_servers import start_fast_server

    server = start_fast_server()
    try:
        url = server.url
        saved = tmp_path / "first-try.yml"
        r = cli(
            "run", "--url", url, "--concurrency", "2", "--requests", "20", "--set", "telemetry.server_interval=0.1s",
            "--input-tokens", "32", "--output-tokens", "{dist: uniform, min: 4, max: 8}",
            "--save-scenario", saved, "-o", tmp_path / "a", "-q",
            "--set", "outputs.requests_jsonl=true",
            # the subject is the command, not the client's timing on a shared machine
            "--set", "load.validity.max_dispatch_lag_p99=2s",
            "--set", "load.validity.max_loop_lag_p99=2s",
            "--set", "load.validity.max_stamp_delay_share=1000",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "model: stub-model" in r.stderr
        # no tokenizer for the stub model here: said before the run, and recorded
        assert "no tokenizer for 'stub-model'" in r.stderr
        m = json.loads((tmp_path / "a" / "metrics.json").read_text())
        assert m["status"] == "ok" and m["requests"]["completed"] == 20
        sc = m["scenario"]
        assert sc["backend"]["model"] == "stub-model" and sc["backend"]["api"] == "completions"
        assert m["backend"]["prompt_sizing"].startswith("bytes of text")
        assert (sc["load"]["arrival"]["kind"], sc["load"]["arrival"]["users"]) == ("concurrency", 2)
        assert (tmp_path / "a" / "scenario.yml").read_text() == saved.read_text()
        rows = [json.loads(x) for x in (tmp_path / "a" / "requests.jsonl").read_text().splitlines()]
        # the server's response ids (its arrival stamp for each request), and its usage count
        # (the number of chunks it sent)
        ids = [r["response_id"] for r in rows]
        assert len(set(ids)) == len(rows) and all(i.startswith("arrived-") for i in ids)
        assert all(r["reported_output_tokens"] == r["output_tokens"] for r in rows)
        # the server's own view, from its /metrics (vLLM's names, mapped to common ones)
        view = m["server"]
        assert view["available"] and view["samples"] >= 1
        assert view["server_names"]["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
        assert view["metrics"]["kv_cache_usage"]["mean"] == 0.25
        assert (tmp_path / "a" / "server.csv").read_text().startswith("t_s,requests_running")
        assert saved.read_text().startswith("# Written by: loadtest run --url")
        # the saved file holds the --set overrides too: with no flags at all it is the same run
        saved_data = yaml.safe_load(saved.read_text())
        assert saved_data["outputs"] == {"requests_jsonl": True}
        assert saved_data["telemetry"] == {"server_interval": "0.1s"}
        again = cli("run", saved, "-o", tmp_path / "b", "-q")
        assert again.returncode == 0, again.stderr
        m2 = json.loads((tmp_path / "b" / "metrics.json").read_text())
        assert m2["scenario"] == sc
        assert (tmp_path / "b" / "requests.jsonl").is_file()
        # a server with nothing at the URL: a clear error before anything runs
        dead = cli(
            "run", "--url", f"http://127.0.0.1:{_free_port()}/v1", "-q", "-o", tmp_path / "c"
        )
        assert dead.returncode == 4 and "no answer" in dead.stderr
        # vLLM's --request-rate with --max-concurrency: an open loop with a cap on what is
        # in flight, the wait for a slot its own figure
        both = cli(
            "run", "--url", url, "--rate", "200", "--concurrency", "2", "--requests", "30",
            "-o", tmp_path / "d", "-q", "--set", "load.validity.max_stamp_delay_share=1000",
        )  # fmt: skip
        assert both.returncode in (0, 3), both.stderr
        m3 = json.loads((tmp_path / "d" / "metrics.json").read_text())
        load = m3["scenario"]["load"]
        assert (load["arrival"], load["max_in_flight"]) == ({"kind": "poisson", "rate": 200.0}, 2)
        assert m3["latency_ms"]["slot_wait"]["count"] == 30
        assert m3["latency_ms"]["slot_wait"]["max"] > 0  # 200/s into 2 slots: requests waited
        assert not any("dispatch lag" in r for r in m3["validity"]["reasons"])
    finally:
        server.kill()


def test_a_disk_that_takes_no_large_file_loses_only_those_files_and_says_which(tmp_path):
    """Every file degrades on its own (a per-file size limit stands in for a full disk):
    metrics.json is written and says which exports failed; each report file is tried, and the
    error names the ones not written and the ones written; the exit code is the run's."""
    import resource

    limit = 32 << 10  # metrics.json (~14 KB) fits; report.html and the exports do not

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG on write instead of a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    data = {**SIM_DEMO, "outputs": {"requests_jsonl": True}}
    data["load"] = {**SIM_DEMO["load"], "arrival": {"kind": "poisson", "rate": 200}}
    out = tmp_path / "out"
    r = cli("run", write(tmp_path, data), "--out", out, "-q", preexec_fn=small_files)
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "ok"
    assert any(
        "requests.jsonl (File too large)" in w and "requests.csv" in w
        for w in m["validity"]["warnings"]
    ), m["validity"]["warnings"]
    assert (
        "could not write report.html (File too large); written: report.md, "
        "timeseries.csv, histograms.hlog; metrics.json is intact" in r.stderr.replace("\n", " ")
    )
    on_disk = {p.name for p in out.iterdir()}
    assert on_disk == {".loadtest-run", "metrics.json", "report.md", "timeseries.csv",
                       "histograms.hlog"}  # nothing half-written left behind  # fmt: skip
    assert set((out / ".loadtest-run").read_text().split()) == on_disk - {".loadtest-run"}
