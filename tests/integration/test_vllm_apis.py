"""The APIs beyond streamed chat against a real vLLM (PyPI's CPU build, tests/real_servers.py),
through the CLI and the shipped scenarios, as a user would run them: embeddings and rerank
from tiny BERTs served with ``--runner pooling``, and the Responses API, structured answers
and tool calls from the session's tiny Llama (tool calls parsed by hermes).

The checks of tool calls and structured answers are compared with what the server answers
the same prompt without streaming, at temperature 0, judged here by hand."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from loadtest.telemetry.server_names import SPECULATIVE
from tests.conftest import LENIENT

pytest.importorskip("aiohttp")
jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "what is the weather in the city of the quick brown fox"


def run(scenario: str, server, out: Path, *sets: str) -> dict:
    """``loadtest run scenarios/<scenario> --set ...`` against ``server``: its result."""
    overrides = [
        f"backend.base_url={server.url}",
        f"backend.model={server.served_name}",
        *server.client_sets(),  # a private CA and a client certificate, where it asks for them
        "outputs.requests_jsonl=true",
        f"load.validity={json.dumps(LENIENT)}",
        *sets,
    ]
    args = [
        sys.executable,
        "-m",
        "loadtest",
        "run",
        str(ROOT / "scenarios" / scenario),
        "-o",
        str(out),
        "-q",
    ]
    for item in overrides:
        args += ["--set", item]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert (out / "metrics.json").is_file(), r.stderr[-3000:]
    return json.loads((out / "metrics.json").read_text())


def records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]


def post(server, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        server.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def one_prompt_dataset(tmp_path: Path, prompt: str = PROMPT) -> str:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"prompt": prompt}) + "\n")
    return str(path)


def test_embeddings_each_request_embeds_its_inputs_sized_by_the_servers_count(vllm_more, tmp_path):
    out = tmp_path / "embed"
    m = run(
        "served-embeddings.yml", vllm_more["embed"], out,
        "load.arrival.rate=4", "load.duration=3s", "load.warmup=1s", "workload.input_tokens=32",
    )  # fmt: skip
    assert m["requests"]["failed"] == 0 and m["requests"]["completed"] >= 6
    assert m["api"]["name"] == "embeddings" and m["api"]["inputs_per_request"] == 8
    lat = m["latency_ms"]
    assert lat["ttft"]["count"] == 0 and lat["e2e"]["count"] == m["requests"]["completed"]
    t = m["throughput"]
    assert t["inputs_per_s"] == pytest.approx(8 * t["requests_per_s"])
    # 8 texts of 32 tokens each as the server counts them ([CLS] and [SEP] included)
    for r in records(out):
        assert r["input_tokens"] == r["planned_input_tokens"] == 8 * 32, r
    assert m["backend"]["http"].get("prompt_token_mismatch", 0) == 0


def test_rerank_ranks_every_document_against_the_query(vllm_more, tmp_path):
    out = tmp_path / "rerank"
    m = run(
        "served-rerank.yml", vllm_more["rerank"], out,
        "load.arrival.rate=4", "load.duration=3s", "load.warmup=1s",
        "workload.input_tokens=20", "workload.documents=4",
    )  # fmt: skip
    assert m["requests"]["failed"] == 0 and m["requests"]["completed"] >= 6
    assert m["api"]["inputs_per_request"] == 4
    # each (query, document) pair: 18 + 18 tokens of text (20 planned, less the 2 a text
    # gets alone) and BERT's [CLS] [SEP] [SEP]: 39 tokens, 4 pairs a request
    assert [r["input_tokens"] for r in records(out)] == [4 * 39] * len(records(out))


def _verdict(text: str, schema: dict, cut: bool) -> str:
    if cut:
        return "cut_at_length"
    try:
        value = json.loads(text)
    except ValueError:
        return "bad_json"
    return "ok" if jsonschema.Draft202012Validator(schema).is_valid(value) else "schema_mismatch"


def test_structured_answers_through_the_responses_api(vllm_server, tmp_path):
    """Every request the same prompt at temperature 0: each answer is the one the server gives
    without streaming, and its verdict is the one judged here."""
    import yaml

    scenario = yaml.safe_load((ROOT / "scenarios" / "served-structured.yml").read_text())
    schema = scenario["workload"]["response_format"]["schema"]
    body = {
        "model": vllm_server.served_name,
        "input": PROMPT,
        "max_output_tokens": 48,
        "temperature": 0,
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": schema}},
    }
    answer = post(vllm_server, "/responses", body)
    text = "".join(
        part.get("text", "")
        for item in answer["output"]
        if item.get("type") == "message"
        for part in item.get("content", [])
    )
    expected = _verdict(text, schema, answer["status"] == "incomplete")
    out = tmp_path / "structured"
    m = run(
        "served-structured.yml", vllm_server, out,
        "workload.input_tokens=null", f"workload.dataset={one_prompt_dataset(tmp_path)}",
        "workload.output_tokens=48",
        "backend.extra_body.temperature=0", "load.arrival={kind: concurrency, users: 1}",
        "load.requests=4", "load.warmup=0s", "load.duration=null",
    )  # fmt: skip
    assert m["requests"]["completed"] == 4, m["validity"]
    sc = m["api"]["structured"]
    assert sc["checked"] == 4
    assert {k: sc[k] for k in ("bad_json", "schema_mismatch", "cut_at_length")} == {
        k: 4 * (k == expected) for k in ("bad_json", "schema_mismatch", "cut_at_length")
    }
    assert m["requests"]["output_tokens"] == 4 * answer["usage"]["output_tokens"]


def test_tool_call_arguments_are_stamped_and_checked(vllm_server, tmp_path):
    tools = json.loads((ROOT / "scenarios" / "data" / "tools.json").read_text())
    body = {
        "model": vllm_server.served_name,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 128,
        "temperature": 0,
        "tools": tools,
        "tool_choice": "required",
    }
    answer = post(vllm_server, "/chat/completions", body)
    choice = answer["choice"] if "choice" in answer else answer["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    cut = choice["finish_reason"] == "length"
    verdicts = [
        _verdict(
            c["function"]["arguments"], schemas[c["function"]["name"]], cut and k == len(calls) - 1
        )
        for k, c in enumerate(calls)
    ]
    out = tmp_path / "tools"
    m = run(
        "served-tools.yml", vllm_server, out,
        "workload.input_tokens=null", f"workload.dataset={one_prompt_dataset(tmp_path)}",
        "workload.output_tokens=128",
        "backend.extra_body.temperature=0", "load.arrival={kind: concurrency, users: 1}",
        "load.requests=4", "load.warmup=0s", "load.duration=null",
    )  # fmt: skip
    assert m["requests"]["completed"] == 4, m["validity"]
    tc = m["api"]["tool_calls"]
    assert (tc["requests"], tc["calls"]) == (4, 4 * len(calls))
    assert tc["missing"] == 4 * (not calls)
    for k in ("bad_json", "schema_mismatch", "cut_at_length"):
        assert tc[k] == 4 * verdicts.count(k), (k, verdicts, tc)
    # the server's count of output tokens, each stamped (the parser withholds the call's
    # markup: fewer chunks than tokens, and the usage is trusted up to the tokens asked for)
    assert m["requests"]["output_tokens"] == 4 * answer["usage"]["completion_tokens"]
    assert all(len(r["token_ns"]) == answer["usage"]["completion_tokens"] for r in records(out))


def test_speculative_decodings_acceptance_comes_from_the_servers_counters(vllm_more, tmp_path):
    """A prompt that repeats itself: n-gram drafts from it; the window's acceptance rate and
    length agree with the counters' change, and stay within what 3 draft tokens allow."""
    spec = vllm_more["spec"]
    out = tmp_path / "spec"
    m = run(
        "served.yml", spec, out,
        "backend.api=completions", "workload.input_tokens=null",
        f"workload.dataset={one_prompt_dataset(tmp_path, PROMPT + ' ' + PROMPT)}",
        "workload.output_tokens=48", "backend.extra_body.temperature=0",
        "load.arrival={kind: concurrency, users: 1}", "load.requests=6", "load.warmup=0s",
        "load.duration=null", "telemetry.server_interval=100ms",
    )  # fmt: skip
    assert m["requests"]["completed"] == 6, m["validity"]
    server = m["server"]["metrics"]
    assert set(SPECULATIVE) <= set(m["server"]["server_names"])
    assert server["spec_drafts"]["run_change"] > 0
    drafts, accepted = (
        server["spec_drafts"]["run_change"],
        server["spec_accepted_tokens"]["run_change"],
    )
    draft_tokens = server["spec_draft_tokens"]["run_change"]
    assert 0 <= accepted <= draft_tokens <= 3 * drafts
    rate, length = server["spec_acceptance_rate"]["window"], server["spec_accept_length"]["window"]
    assert 0 <= rate <= 1 and 1 <= length <= 4
    report = (out / "report.md").read_text()
    assert "spec_acceptance_rate (vllm:spec_decode_num_accepted_tokens)" in report


def test_a_reasoning_parsers_split_is_counted_and_the_answer_timed(vllm_more, tmp_path):
    """DeepSeek-R1's parser: everything before ``</think>`` is reasoning. The random model
    emits ``</think>`` now and then, so some answers have an answer part and some do not."""
    out = tmp_path / "reasoning"
    m = run(
        "served-reasoning.yml", vllm_more["spec"], out,
        "workload.input_tokens=32", "workload.output_tokens=48", "workload.output=fixed",
        "load.arrival={kind: concurrency, users: 2}", "load.requests=12", "load.warmup=0s",
        "load.duration=null", "sla=null",
    )  # fmt: skip
    assert m["requests"]["completed"] == 12, m["validity"]
    rows = records(out)
    api = m["api"]
    assert api["reasoning_tokens"] == sum(r["reasoning_tokens"] for r in rows) > 0
    assert api["reasoning_tokens"] + api["answer_tokens"] == m["requests"]["output_tokens"]
    answered = [r for r in rows if r["reasoning_tokens"] < r["output_tokens"]]
    for r in rows:
        assert 0 <= r["reasoning_tokens"] <= r["output_tokens"] == 48
        # an answer after its reasoning (or straight away: its first token is the answer's)
        assert (r["ttft_answer_ms"] is not None) == (r in answered), r
        if r in answered:
            assert r["ttft_answer_ms"] >= r["ttft_ms"]
        if r in answered and r["reasoning_tokens"] == 0:
            assert r["ttft_answer_ms"] == r["ttft_ms"]
    assert m["latency_ms"]["ttft_answer"]["count"] == len(answered)


@pytest.mark.parametrize("api", ["chat", "completions", "responses"])
def test_unstreamed_answers_are_timed_whole_and_their_tokens_counted(vllm_server, tmp_path, api):
    """``stream: false``: one JSON answer a request. Its end-to-end latency and its tokens (the
    server's usage: 8 each, ignore_eos) are measured; no TTFT or inter-token latency is
    claimed, and the report says the answers were not streamed."""
    out = tmp_path / api
    m = run(
        "served.yml", vllm_server, out,
        f"backend.api={api}", "backend.stream=false", "workload.input_tokens=16",
        "workload.output_tokens=8", "load.arrival={kind: concurrency, users: 2}",
        "load.requests=6", "load.warmup=0s", "load.duration=null", "sla=null",
    )  # fmt: skip
    assert m["requests"]["completed"] == 6 and m["requests"]["failed"] == 0, m["validity"]
    lat = m["latency_ms"]
    assert lat["e2e"]["count"] == 6
    assert lat["ttft"]["count"] == 0 and lat["itl"]["count"] == 0
    assert m["api"]["streams_tokens"] is False and m["backend"]["streamed"] is False
    rows = records(out)
    assert [r["output_tokens"] for r in rows] == [8] * 6
    assert all(r["ttft_ms"] is None and r["token_ns"] == [] for r in rows)
    t = m["throughput"]
    assert t["output_tokens_in_window"] == 6 * 8
    assert t["output_tokens_per_s"] == pytest.approx(48 / t["window_s"])
    assert "one JSON answer, no stream" in (out / "report.md").read_text()


def test_an_unstreamed_run_refuses_objectives_on_what_it_cannot_see(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "validate", str(ROOT / "scenarios" / "served.yml"),
         "--set", "backend.stream=false"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2
    assert "sla.ttft_p99: backend.stream: false: no token is stamped on its own" in r.stderr
