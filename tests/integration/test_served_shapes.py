"""Served-model features against a recording stub server (tests/stub_openai.py): multi-turn
histories that hold the server's actual replies, prompts sized by the server's /tokenize, its
profiler endpoints, and the per-request Parquet export."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("aiohttp")

from loadtest.config.loading import load_scenario
from loadtest.session import run_scenario
from tests.conftest import LENIENT, write_scenario
from tests.stub_openai import StubServer


def served(url: str, workload: dict, load: dict, **extra) -> dict:
    return {
        "name": "stub",
        "backend": {"kind": "openai", "base_url": url, "model": "stub", "api": "chat"},
        "workload": workload,
        "load": {**load, "validity": LENIENT},
        "outputs": {"requests_jsonl": True},
        "telemetry": {"gpu": False},
        **extra,
    }


def test_a_later_turn_holds_the_servers_actual_replies(tmp_path):
    with StubServer() as stub:
        data = served(
            stub.url,
            {"input_tokens": 6, "output_tokens": 3, "multi_turn": {"turns": 3}},
            {"arrival": {"kind": "concurrency", "users": 2}, "requests": 6},
        )
        run = run_scenario(load_scenario(write_scenario(tmp_path, data), []), tmp_path / "run")
    m = run.metrics
    assert m["status"] == "ok", m["validity"]
    s = m["sessions"]
    assert s["history"] == "the server's replies" and s["ended_by_failure"] == 0
    # The two users share the 6 requests in the order their turns come: most often two whole
    # sessions, but a user whose replies came first may start a second session and leave the
    # other's last turn past the count (cut). Either way every session is whole or cut.
    assert s["turns_sent"] == 6 and s["completed"] + s["cut_at_window_end"] == s["started"]
    assert s["completed"] >= 1
    turns = [b for b in stub.bodies if len(b.get("messages", [])) > 1]
    assert len(turns) == s["turns_sent"] - s["started"] >= 2  # every turn after a first
    by_first_message = {
        json.dumps(b["messages"]): i + 1 for i, b in enumerate(stub.bodies)
    }  # the stub tags its i-th answer r<i>
    for body in turns:
        msgs = body["messages"]
        assert [x["role"] for x in msgs] == ["user", "assistant"] * (len(msgs) // 2) + ["user"]
        # each assistant message is, exactly, what the stub answered the request before it
        for k in range(1, len(msgs), 2):
            asked = by_first_message[json.dumps(msgs[:k])]
            assert msgs[k]["content"] == stub.reply_text(asked, 3)


def test_without_a_tokenizer_prompts_are_sized_by_the_servers_tokenize(tmp_path):
    with StubServer(tokenize=True, profiler=True) as stub:
        data = served(
            stub.url,
            {"input_tokens": 10, "output_tokens": 2},
            {"arrival": {"kind": "concurrency", "users": 1}, "requests": 4},
            profile={"requests": [1, 2]},
        )
        run = run_scenario(load_scenario(write_scenario(tmp_path, data), []), tmp_path / "run")
    m = run.metrics
    assert m["backend"]["prompt_sizing"].startswith(
        "bytes scaled by the server's /tokenize: 4 bytes"
    )
    # the stub counts a token every 4 bytes: a 10-token prompt is 40 bytes of text
    prompts = [b["messages"][0]["content"] for b in stub.bodies if b["max_tokens"] == 2]
    assert [len(p) for p in prompts][-4:] == [40] * 4
    # the input counts recorded are the server's (its usage says 1 prompt token)
    assert m["requests"]["input_tokens"] == 4
    # the profile window called the server's profiler, once on and once off
    assert stub.calls.count("/start_profile") == 1 and stub.calls.count("/stop_profile") == 1
    assert m["profile"]["profiler"].startswith("the server's")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(tmp_path / "run" / "requests.parquet")
    assert table.num_rows == 4 and table.column("response_id").to_pylist()[0].startswith("r")


@pytest.mark.parametrize("count", [1, 10**9], ids=["one_token", "a_billion"])
def test_a_tokenize_whose_counts_no_tokenizer_makes_is_not_used(tmp_path, count):
    """A broken or hostile /tokenize (4096 bytes a token, or a billion tokens in 4096 bytes)
    would make every prompt thousands of times longer, or empty: its counts are not used, and
    the result says so (prompts stay sized in bytes)."""
    with StubServer(tokenize=True, tokenize_count=count) as stub:
        data = served(
            stub.url,
            {"input_tokens": 10, "output_tokens": 2},
            {"arrival": {"kind": "concurrency", "users": 1}, "requests": 3},
        )
        run = run_scenario(load_scenario(write_scenario(tmp_path, data), []), tmp_path / "run")
    sizing = run.metrics["backend"]["prompt_sizing"]
    assert sizing.startswith("bytes of text") and "was not used" in sizing, sizing
    prompts = [b["messages"][0]["content"] for b in stub.bodies if b["max_tokens"] == 2]
    assert [len(p) for p in prompts][-3:] == [10] * 3  # a 10-token prompt is 10 bytes


def test_a_server_without_profiler_endpoints_is_said_so(tmp_path):
    with StubServer() as stub:
        data = served(
            stub.url,
            {"input_tokens": 4, "output_tokens": 2},
            {"arrival": {"kind": "concurrency", "users": 1}, "requests": 3},
            profile={"requests": [0, 1]},
        )
        run = run_scenario(load_scenario(write_scenario(tmp_path, data), []), tmp_path / "run")
    assert run.metrics["status"] == "ok"
    p = run.metrics["profile"]
    assert p["profiler"] == (
        "none: it did not start (POST /start_profile: HTTP 404 (vLLM serves it when started "
        "with --profiler-config))"
    )
    # no profiler ran: nothing is flagged or left out, and the result says so
    assert p["requests_flagged"] == run.metrics["requests"]["profiled"] == 0
    assert any("did not start" in w for w in run.metrics["validity"]["warnings"])


def test_t0_on_the_hosts_clock_joins_the_servers_own_stamps(tmp_path):
    """``window.t0_clock_ns`` is t0 on CLOCK_MONOTONIC: a server's arrival stamp, on the same
    host, falls between each request's intended time and its first token."""
    with StubServer() as stub:
        data = served(
            stub.url,
            {"input_tokens": 6, "output_tokens": 3},
            {"arrival": {"kind": "constant", "rate": 20}, "requests": 5},
        )
        m = run_scenario(
            load_scenario(write_scenario(tmp_path, data), []), tmp_path / "run"
        ).metrics
    t0 = m["window"]["t0_clock_ns"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    # (the client's start-up probe is one more generation the stub saw)
    assert len(rows) == 5 and {r["response_id"] for r in rows} <= set(stub.arrivals)
    for r in rows:
        arrived = stub.arrivals[r["response_id"]]
        assert t0 + r["intended_ns"] <= arrived <= t0 + r["first_token_ns"]


def test_a_reply_past_the_kept_length_is_cut_for_the_history_and_said(tmp_path, monkeypatch):
    """What a session keeps of a reply for its next turn's history is bounded (1 MiB; 4
    characters here, to see it): the next turn carries the reply's start, and the result
    counts the replies cut."""
    from loadtest.backends.openai import stream

    monkeypatch.setattr(stream, "MAX_REPLY_CHARS", 4)
    with StubServer() as stub:
        data = served(
            stub.url,
            {"input_tokens": 6, "output_tokens": 3, "multi_turn": {"turns": 2}},
            {"arrival": {"kind": "concurrency", "users": 1}, "requests": 2},
        )
        run = run_scenario(load_scenario(write_scenario(tmp_path, data), []), tmp_path / "run")
        second = stub.bodies[-1]["messages"]
    m = run.metrics
    assert m["backend"]["http"]["replies_cut"] == 2
    assert any("session replies were longer than" in w for w in m["validity"]["warnings"])
    reply = next(msg["content"] for msg in second if msg["role"] == "assistant")
    assert len(reply) <= 4 + 16  # the first chunk or so: one chunk is kept whole
