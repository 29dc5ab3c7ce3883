"""Cancellations of a served model, against the recording stub (tests/stub_openai.py), whose
words come 20 ms apart: the client stops reading when the plan says (a time from the intended
send, or a number of tokens), keeps what it read, and closes the connection, so the server
sees the client leave and stops writing."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("aiohttp")

from loadtest.config.loading import load_scenario
from loadtest.session import run_scenario
from tests.conftest import LENIENT, write_scenario
from tests.integration.test_served_apis import records
from tests.stub_openai import StubServer

WORD_GAP_S = 0.02
N = 4


def run(tmp_path, url: str, cancel: dict, tokenizer: str | None = None) -> dict:
    data = {
        "name": "stub-cancel",
        "backend": {
            "kind": "openai",
            "base_url": url,
            "model": "stub",
            "api": "completions",
            "tokenizer": tokenizer,
        },  # fmt: skip
        "workload": {"input_tokens": 8, "output_tokens": 100},  # 2 s a request, unread
        "load": {
            "arrival": {"kind": "concurrency", "users": 2},
            "requests": N,
            "cancel": {"fraction": 1.0, **cancel},
            "validity": LENIENT,
        },
        "outputs": {"requests_jsonl": True},
        "telemetry": {"gpu": False, "server": False},
    }
    return run_scenario(load_scenario(write_scenario(tmp_path, data), []), tmp_path / "run").metrics


def all_left(stub: StubServer) -> bool:
    """Whether the stub saw every request's client leave, within 10 s (it notices at its next
    write, a word gap after the close). The run's requests are those for 100 tokens (the
    client's probe before t0 is not one)."""
    tags = {f"r{i}" for i, b in enumerate(stub.bodies, 1) if b.get("max_tokens") == 100}
    deadline = time.monotonic() + 10
    while not tags <= set(stub.left) and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(tags) == N and tags <= set(stub.left)


def test_a_time_cancel_stops_the_read_and_the_server_sees_the_client_leave(tmp_path):
    with StubServer(word_gap_s=WORD_GAP_S) as stub:
        m = run(tmp_path, stub.url, {"after": "150ms"})
        left = all_left(stub)
    c = m["traffic"]["cancel"]
    assert c["cancelled"] == N and m["requests"]["failed"] == m["requests"]["completed"] == 0
    # words come at 20, 40, ... ms after the send, which is after the intended time: at most
    # 7 are in by 150 ms
    assert 0 <= c["tokens_received"] <= 7 * N
    assert c["cancelled_at_ms"]["max"] < 150 + 1000  # the backend's own stop, not the grace's
    rows = records(tmp_path)
    assert [r["status"] for r in rows] == ["cancelled"] * N
    # from the intended send, never early (exact here; the histogram's 3 figures may show
    # 150.0 ms as 149.888, its bucket's floor)
    assert min(r["done_ns"] - r["intended_ns"] for r in rows) >= 150_000_000
    assert left  # every connection closed, not read to its end


def test_a_token_cancel_keeps_exactly_the_tokens_read(tmp_path, tiny_model_dir):
    """With a tokenizer that makes several tokens of each of the stub's words (``r2w0``): the
    stub streams a chunk a token (its probe's usage says so), so a stream cut short is
    counted a chunk a token too, not by the tokenizer's count of each word alone."""
    with StubServer(word_gap_s=WORD_GAP_S) as stub:
        m = run(tmp_path, stub.url, {"after_tokens": 3}, str(tiny_model_dir))
        left = all_left(stub)
    c = m["traffic"]["cancel"]
    assert c["cancelled"] == N and c["tokens_received"] == 3 * N
    assert [r["output_tokens"] for r in records(tmp_path)] == [3] * N
    # the third word comes 60 ms after the send at the soonest
    assert c["cancelled_at_ms"]["min"] >= 3 * WORD_GAP_S * 1000
    assert left
