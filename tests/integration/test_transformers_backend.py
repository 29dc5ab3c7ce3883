"""The transformers backend on the CPU, through the real loading path: a tiny Llama and a
tokenizer trained here, saved with save_pretrained, loaded by the engine worker process."""

from __future__ import annotations

import json

import pytest
import yaml

pytest.importorskip("transformers")

from loadtest.config.loading import load_scenario
from loadtest.session import run_scenario
from tests.conftest import LENIENT
from tests.tiny_model import CORPUS


def run(
    tmp_path,
    model_dir,
    backend: dict,
    load: dict,
    workload=None,
    env=None,
    monkeypatch=None,
    profile=None,
    hooks=(),
) -> tuple[dict, list]:
    data = {
        "name": "hf",
        "backend": {"kind": "transformers", "model": str(model_dir), "device": "cpu", **backend},
        "workload": workload
        or {"input_tokens": {"dist": "uniform", "min": 4, "max": 40}, "output_tokens": 6},
        "load": {"validity": LENIENT, **load},
        "outputs": {"requests_jsonl": True},
        **({"profile": profile} if profile else {}),
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "s.yml"
    path.write_text(yaml.safe_dump(data))
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    if hooks:
        from loadtest.backends.transformers.backend import TransformersBackend

        monkeypatch.setattr(TransformersBackend, "engine_hooks", hooks)
    result = run_scenario(load_scenario(path), tmp_path / "run")
    rows = (
        [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
        if (tmp_path / "run" / "requests.jsonl").exists()
        else []
    )
    return result.metrics, rows


def test_single_mode_stamps_every_token(tmp_path, tiny_model_dir):
    m, rows = run(
        tmp_path,
        tiny_model_dir,
        {"mode": "single"},
        {"arrival": {"kind": "concurrency", "users": 1}, "requests": 6, "warmup_requests": 1},
    )
    assert m["status"] == "ok" and m["requests"]["completed"] == 6
    # one closed-loop user: nothing to fall behind on, but 6 requests are too few intervals to
    # judge its latency's trend, so its steadiness is unknown, not claimed
    assert m["stability"]["steady"] is None and m["stability"]["open_loop"] is False
    assert m["backend"]["architecture"] == "LlamaForCausalLM" and m["backend"]["warmup_s"] >= 0
    assert m["backend"]["warmup_compile_s"] == 0  # eager: nothing compiled
    assert 0 <= m["backend"]["warmup_gc_s"] <= m["backend"]["warmup_s"]
    for r in rows:
        assert r["output_tokens"] == 6 and len(r["token_ns"]) == 6  # fixed output: EOS ignored
        assert r["token_ns"] == sorted(r["token_ns"])
        assert (
            r["intended_ns"] <= r["sent_ns"] <= r["admitted_ns"] <= r["token_ns"][0] <= r["done_ns"]
        )
    lat = m["latency_ms"]
    assert 0 < lat["ttft"]["p50"] < lat["e2e"]["p50"]
    assert lat["itl"]["count"] == 6 * 5


def test_static_batches_never_exceed_max_batch_size(tmp_path, tiny_model_dir):
    m, rows = run(
        tmp_path,
        tiny_model_dir,
        {"mode": "static", "max_batch_size": 3, "max_wait_ms": 50},
        {"arrival": {"kind": "burst"}, "requests": 10},
    )
    assert m["requests"]["completed"] == 10
    batches: dict[int, int] = {}
    for r in rows:
        batches[r["admitted_ns"]] = batches.get(r["admitted_ns"], 0) + 1
    assert max(batches.values()) == 3 and sum(batches.values()) == 10
    assert len(batches) == 4  # 3 + 3 + 3 + 1
    assert m["backend"]["warmup_batch_sizes"] == [
        1,
        2,
        3,
    ]  # every size the batcher can form, before t0


def test_queue_time_grows_when_the_batcher_waits(tmp_path, tiny_model_dir):
    load = {"arrival": {"kind": "constant", "rate": 8}, "requests": 8}
    quick, _ = run(
        tmp_path / "a",
        tiny_model_dir,
        {"mode": "static", "max_batch_size": 8, "max_wait_ms": 0},
        load,
    )
    slow, _ = run(
        tmp_path / "b",
        tiny_model_dir,
        {"mode": "static", "max_batch_size": 8, "max_wait_ms": 300},
        load,
    )
    # Requests 125 ms apart: waiting up to 300 ms for company puts most of them in the queue.
    assert slow["latency_ms"]["queue"]["p50"] > quick["latency_ms"]["queue"]["p50"] + 50


def test_injected_oom_fails_only_that_batch(tmp_path, tiny_model_dir, monkeypatch):
    m, rows = run(
        tmp_path,
        tiny_model_dir,
        {"mode": "static", "max_batch_size": 4, "max_wait_ms": 100},
        {"arrival": {"kind": "burst"}, "requests": 12},
        hooks=("tests.engine_faults:oom_in_batch_2",),
        monkeypatch=monkeypatch,
    )
    assert m["requests"]["errors_by_type"] == {"CudaOOM": 4}
    assert m["requests"]["completed"] == 8 and m["status"] == "ok"


def test_worker_death_ends_the_run_with_what_it_measured(tmp_path, tiny_model_dir, monkeypatch):
    m, rows = run(
        tmp_path,
        tiny_model_dir,
        {"mode": "single"},
        {"arrival": {"kind": "concurrency", "users": 1}, "requests": 8},
        hooks=("tests.engine_faults:exit_at_batch_4",),
        monkeypatch=monkeypatch,
    )
    assert m["status"] == "failed"
    assert m["requests"]["completed"] == 3
    assert "exit code 3" in m["harness"]["failure"]


def test_a_worker_crash_says_what_crashed_it(tmp_path, tiny_model_dir, monkeypatch):
    """An error nothing in the worker catches (here in warm-up) reaches the result by name,
    not as a bare exit code."""
    data = {
        "name": "hf",
        "backend": {"kind": "transformers", "model": str(tiny_model_dir), "device": "cpu"},
        "workload": {"input_tokens": 4, "output_tokens": 4},
        "load": {"arrival": {"kind": "burst"}, "requests": 2},
    }
    from loadtest.backends.transformers.backend import TransformersBackend

    monkeypatch.setattr(
        TransformersBackend, "engine_hooks", ("tests.engine_faults:crash_in_warmup",)
    )
    path = tmp_path / "s.yml"
    path.write_text(yaml.safe_dump(data))
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "failed"
    assert m["backend"]["error"] == (
        "backend failed to start: engine worker died during warm-up: engine worker crashed: "
        "TypeError: injected by tests.engine_faults: a warm-up that cannot run"
    )


def test_natural_output_and_chat_dataset(tmp_path, tiny_model_dir):
    data = tmp_path / "chats.jsonl"
    data.write_text(
        "\n".join(json.dumps({"messages": [{"role": "user", "content": t}]}) for t in CORPUS[:4])
    )
    m, rows = run(
        tmp_path,
        tiny_model_dir,
        {"mode": "static", "max_batch_size": 4},
        {"arrival": {"kind": "burst"}, "requests": 4},
        workload={"dataset": str(data), "output_tokens": 12, "output": "natural"},
    )
    assert m["requests"]["completed"] == 4
    assert all(1 <= r["output_tokens"] <= 12 for r in rows)
    # the chat template was applied: "<s>user: ...\nassistant:" is longer than the bare text
    assert min(r["input_tokens"] for r in rows) > 5


def test_missing_model_is_a_scenario_error_not_a_crash(tmp_path):
    path = tmp_path / "s.yml"
    path.write_text(
        "name: x\nbackend: {kind: transformers, model: ./nope}\nload: {arrival: {kind: burst}, requests: 1}\n"
    )
    from loadtest.core.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"s.yml:2: backend.model"):
        load_scenario(path)


def test_continuous_mode_streams_every_token(tmp_path, tiny_model_dir):
    m, rows = run(
        tmp_path,
        tiny_model_dir,
        {
            "mode": "continuous",
            "max_batch_size": 4,
            "continuous": {"num_blocks": 64, "max_batch_tokens": 256},
        },
        {"arrival": {"kind": "poisson", "rate": 20}, "requests": 12},
        workload={
            "input_tokens": {"dist": "uniform", "min": 4, "max": 40},
            "output_tokens": {"dist": "uniform", "min": 3, "max": 9},
        },
    )
    assert m["status"] == "ok" and m["requests"]["completed"] == 12
    assert m["backend"]["continuous"]["num_blocks"] == 64
    assert "continuous mode" in m["roofline"]["estimated"] and m["roofline"]["decode"]["steps"] > 0
    for r in rows:
        assert 3 <= r["output_tokens"] <= 9 and len(r["token_ns"]) == r["output_tokens"]
        assert r["token_ns"] == sorted(r["token_ns"])
        assert r["sent_ns"] <= r["token_ns"][0] <= r["done_ns"]
    assert m["latency_ms"]["ttft"]["p50"] < m["latency_ms"]["e2e"]["p50"]


def test_a_wedged_worker_fails_the_run_at_the_stall_timeout_and_is_killed(
    tmp_path, tiny_model_dir, monkeypatch
):
    """``kill -STOP`` of the engine worker: it is alive and silent. The run must end (status
    failed) about ``stall_timeout`` later with what it measured, and the worker must not outlive it."""
    import time

    t = time.monotonic()
    m, _ = run(
        tmp_path,
        tiny_model_dir,
        {"mode": "static", "max_batch_size": 2, "max_wait_ms": 50},
        {
            "arrival": {"kind": "burst"},
            "requests": 12,
            "stall_timeout": "3s",
        },
        hooks=("tests.engine_faults:freeze_at_batch_3",),
        monkeypatch=monkeypatch,
    )
    assert m["status"] == "failed"
    r = m["requests"]
    # batches 1 and 2 finished (1 or 2 requests each: how many joined a batch within its
    # 50 ms wait depends on the machine's speed); every other request was cut off
    assert 2 <= r["completed"] <= 4 and r["completed"] + r["interrupted"] == r["sent"] == 12
    assert "stopped answering" in m["harness"]["failure"]
    assert time.monotonic() - t < 120  # load + warm-up + 3 s of silence + stop, never a hang
    import subprocess

    leftover = subprocess.run(
        ["pgrep", "-f", "loadtest-engine|multiprocessing.spawn"], capture_output=True, text=True
    )
    stopped = [
        pid
        for pid in leftover.stdout.split()
        if open(f"/proc/{pid}/stat").read().split()[2] == "T"  # a stopped process left behind
    ]
    assert not stopped


def test_call_in_engine_runs_a_hook_beside_the_model_and_reports_its_errors(tiny_model_dir):
    import asyncio

    from loadtest.backends.transformers.backend import TransformersBackend
    from loadtest.config.transformers_spec import TransformersSpec
    from loadtest.core.clock import MonotonicClock
    from loadtest.core.errors import BackendError

    spec = TransformersSpec(kind="transformers", model=str(tiny_model_dir), device="cpu")

    async def go():
        backend = TransformersBackend(spec, MonotonicClock())
        await backend.start()
        try:
            assert await backend.call_in_engine("tests.engine_faults:batches_so_far") == 0
            with pytest.raises(BackendError, match="no_such_hook"):
                await backend.call_in_engine("tests.engine_faults:no_such_hook")
            with pytest.raises(BackendError, match="expected module:function"):
                await backend.call_in_engine("no-colon")
        finally:
            await backend.stop()

    asyncio.run(go())


def test_a_local_encoder_embeds_every_text_of_a_request_in_batches(tmp_path, tiny_encoder_dir):
    """api: embeddings: 6 requests of 3 texts of 20 tokens, through the static batcher (at
    most 4 requests a batch); each request done when its batch's vectors are on the host."""
    m, rows = run(
        tmp_path,
        tiny_encoder_dir,
        {"api": "embeddings", "mode": "static", "max_batch_size": 4, "max_wait_ms": 50},
        {"arrival": {"kind": "concurrency", "users": 6}, "requests": 6},
        workload={"input_tokens": 20, "inputs_per_request": 3},
    )
    assert m["status"] == "ok", m["validity"]
    assert m["requests"]["completed"] == 6 and m["requests"]["input_tokens"] == 6 * 3 * 20
    assert m["api"] == {
        "name": "embeddings", "streams_tokens": False, "inputs_per_request": 3,
        "reasoning_tokens": None, "answer_tokens": None, "tool_calls": None,
        "structured": None, "media": None,
    }  # fmt: skip
    lat = m["latency_ms"]
    assert lat["ttft"]["count"] == 0 and lat["e2e"]["count"] == lat["queue"]["count"] == 6
    assert all(r["output_tokens"] == 0 and r["planned_input_tokens"] == 60 for r in rows)
    # a batch is done at once: its requests share one end; 6 requests make 2 batches or more
    assert 2 <= len({r["done_ns"] for r in rows}) < 6
    assert m["throughput"]["inputs_per_s"] == pytest.approx(3 * m["throughput"]["requests_per_s"])


@pytest.mark.parametrize(
    "backend, expected",
    [
        ({"model": "dummy:tiny-llama"}, "is a decoder: api: embeddings takes an encoder"),
        ({"model": "dummy:tiny-bert", "mode": "continuous"}, "mode static or single"),
        ({"model": "dummy:tiny-bert", "compile": True}, "runs eager"),
    ],
)
def test_an_embeddings_engine_refuses_what_it_cannot_run(tmp_path, backend, expected):
    from tests.conftest import refused_backend_output

    out = refused_backend_output(tmp_path, {"api": "embeddings", **backend})
    assert expected in out
