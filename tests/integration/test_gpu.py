"""GPU tests (opt-in: ``python -m pytest -m gpu``): every mode on a dummy Llama-3.2-1B."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def _run(tmp_path, backend: dict, load: dict, workload: dict | None = None) -> dict:
    import yaml

    from loadtest.config.loading import load_scenario
    from loadtest.session import run_scenario

    path = tmp_path / "s.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "gpu",
                "backend": {
                    "kind": "transformers",
                    "model": "dummy:llama-3.2-1b",
                    "device": "cuda",
                    **backend,
                },
                "workload": workload or {"input_tokens": 128, "output_tokens": 16},
                "load": load,
            }
        )
    )
    return run_scenario(load_scenario(path), tmp_path / "run").metrics


@pytest.mark.parametrize(
    "backend",
    [
        {"mode": "single"},
        {"mode": "static", "max_batch_size": 8, "max_wait_ms": 20},
        {"mode": "continuous", "max_batch_size": 8},
    ],
)
def test_mode_on_gpu(tmp_path, backend):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    m = _run(tmp_path, backend, {"arrival": {"kind": "burst"}, "requests": 16})
    assert m["status"] == "ok" and m["requests"]["completed"] == 16
    assert m["backend"]["device"].startswith("cuda") and m["backend"]["dtype"] == "bfloat16"
    assert m["latency_ms"]["itl"]["count"] == 16 * 15
    assert m["peak_mem_mb"] > 2000  # 1.24 B bf16 parameters alone are ~2.4 GB


def test_a_bert_base_embeds_batches_on_the_gpu(tmp_path):
    """api: embeddings on dummy:bert-base: 200 requests a second of 8 texts of 128 tokens
    through the static batcher (up to 16 requests, 128 texts, a forward pass)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    m = _run(
        tmp_path,
        {"model": "dummy:bert-base", "api": "embeddings", "mode": "static", "max_batch_size": 16},
        {"arrival": {"kind": "poisson", "rate": 200}, "duration": "5s", "warmup": "1s"},
        {"input_tokens": 128, "inputs_per_request": 8},
    )
    done = m["requests"]["completed"]
    assert m["status"] == "ok" and done > 800, m["validity"]
    assert m["requests"]["input_tokens"] == done * 8 * 128
    assert m["latency_ms"]["ttft"]["count"] == 0 and m["latency_ms"]["e2e"]["count"] == done
    t = m["throughput"]
    print(
        f"bert-base embeddings: {t['inputs_per_s']:.0f} texts/s, {t['input_tokens_per_s']:.0f} "
        f"input tok/s, e2e p50 {m['latency_ms']['e2e']['p50']:.1f} ms"
    )


@pytest.mark.parametrize(
    ("fields", "sizes", "decode_rows"),
    [
        ({}, [1, 2, 4, 8], 8),  # every decode step at 8 rows: one static graph
        ({"pad_decode": False}, [2, 4, 8], None),  # one graph marked dynamic
        ({"pad_decode": False, "batch_buckets": [8]}, [8], None),  # one static graph
    ],
)
def test_compiled_static_mode_on_gpu(tmp_path, fields, sizes, decode_rows):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    backend = {"mode": "static", "max_batch_size": 8, "max_wait_ms": 20, "compile": True}
    m = _run(tmp_path, {**backend, **fields}, {"arrival": {"kind": "burst"}, "requests": 16})
    assert m["status"] == "ok" and m["requests"]["completed"] == 16, m["validity"]
    b = m["backend"]
    assert b["batch_buckets"] == sizes and b["warmup_batch_sizes"] == sizes
    assert b["pad_decode"] is (decode_rows is not None) and b["decode_batch_size"] == decode_rows
    assert b["decode_loop"] == ("pipelined" if decode_rows else "generate()")
    assert "cudagraph_skips" not in b, b["cudagraph_skips"]  # every compiled step in a graph
    assert b["recompiles_in_window"] == 0 and 0 < b["warmup_compile_s"] < b["warmup_s"]
    assert b["attn_implementation"] == "sdpa_packed_gqa"  # 32 query heads on 8
    assert m["latency_ms"]["itl"]["count"] == 16 * 15


def _record_steps(loop, steps: list) -> None:
    """Every step's tokens the pipelined ``loop`` hands over from now on, into ``steps``."""
    run = loop.run

    def spy(ids, mask, caps, eos, n, stamp=None):
        def seen(t, tokens):
            steps.append(tokens.tolist())
            stamp(t, tokens)

        return run(ids, mask, caps, eos, n, seen)

    loop.run = spy


def test_the_pipelined_loop_gives_generates_tokens_inside_a_cuda_graph():
    """decode_loop: pipelined on CUDA, compiled by inductor with CUDA graphs: the tokens of
    generate()'s loop (float32, so both paths' kernels agree), every step inside a CUDA graph
    (no skip), one stamp a token; and steps queued ahead of the host, so a decode step costs
    less than generate()'s."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    import time

    from torch._dynamo.utils import counters

    from tests.engine_helpers import input_shapes, make_engine

    batch = [("req", i, [5 + i] * (20 + 7 * i), 24 + 4 * i, True, None) for i in (1, 2, 3)]
    got, seconds = {}, {}
    for loop in ("generate", "pipelined"):
        eng, out = make_engine("dummy:llama-3.2-1b", device="cuda:0", dtype="float32",
                               compile=True, decode_loop=loop)  # fmt: skip
        assert eng.info["decode_loop"] == ("pipelined" if loop == "pipelined" else "generate()")
        eng.warmup.run([(4, 48, 36)])
        skips = counters["inductor"]["cudagraph_skips"]
        steps: list = []
        if loop == "pipelined":
            _record_steps(eng.loop, steps)
        else:
            outputs: list = []
            input_shapes(eng, outputs)
        out.msgs.clear()
        t = time.monotonic()
        eng._generate(batch, set(), out, set())
        seconds[loop] = time.monotonic() - t
        assert counters["inductor"]["cudagraph_skips"] == skips  # no step outside a graph
        assert sorted((m[2], m[3]) for m in out.msgs if m[0] == "done") == [
            (1, 28),
            (2, 32),
            (3, 36),
        ]
        width = max(len(r[2]) for r in batch)
        got[loop] = (
            [[s[i] for s in steps] for i in range(3)]
            if loop == "pipelined"
            else outputs[-1][:3, width:].tolist()
        )
        del eng
        torch.cuda.empty_cache()
    assert got["pipelined"] == got["generate"]
    print(f"36 tokens of 3 rows at 8: generate() {seconds['generate']:.3f} s, "
          f"pipelined {seconds['pipelined']:.3f} s")  # fmt: skip
    assert seconds["pipelined"] < seconds["generate"]


def test_packed_decode_attention_is_transformers_sdpa_on_the_gpu_eager_and_compiled():
    """llama-3.2-1b's decode attention (32 query heads on 8 key/value heads, batch 16, a 608-token
    cache, rows left-padded to different lengths) in bf16, through SDPA's CUDA kernels and
    through inductor: the packed heads give transformers' repeated-heads result."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from loadtest.backends.transformers.attention import packed_gqa_sdpa

    class Module:
        num_key_value_groups, is_causal, training = 4, True, False

    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)

    q, k, v = randn(16, 32, 1, 64), randn(16, 8, 608, 64), randn(16, 8, 608, 64)
    filled = torch.arange(16, device="cuda") * 30 + 100  # row i: its last 100 + 30 i positions
    mask = (torch.arange(608, device="cuda")[None] >= 608 - filled[:, None])[:, None, None, :]
    theirs = sdpa_attention_forward(Module(), q, k, v, mask)[0].float()
    for attend in (packed_gqa_sdpa, torch.compile(packed_gqa_sdpa, fullgraph=True)):
        ours = attend(Module(), q, k, v, mask)[0].float()
        torch.testing.assert_close(ours, theirs, atol=1e-2, rtol=1e-2)


def test_a_wedged_worker_on_the_gpu_fails_the_run_and_is_killed(tmp_path, monkeypatch):
    """``kill -STOP`` of a CUDA engine worker mid-run (through the engine hook): the run ends
    failed at the stall timeout with what it measured, and the result reads back typed."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from loadtest.backends.transformers.backend import TransformersBackend
    from loadtest.results.model import read_run

    monkeypatch.setattr(
        TransformersBackend, "engine_hooks", ("tests.engine_faults:freeze_at_batch_3",)
    )
    m = _run(
        tmp_path,
        {"mode": "static", "max_batch_size": 4, "max_wait_ms": 50},
        {"arrival": {"kind": "burst"}, "requests": 16, "stall_timeout": "5s"},
    )
    assert m["status"] == "failed" and "stopped answering" in m["harness"]["failure"]
    r = m["requests"]  # batches 1 and 2 finished (up to 4 requests each), the rest cut off
    assert 2 <= r["completed"] <= 8 and r["completed"] + r["interrupted"] == r["sent"] == 16
    assert read_run(tmp_path / "run" / "metrics.json").status == "failed"


def _cpus(listed: str) -> set[int]:
    """``"1-7,9"`` -> {1, ..., 7, 9}"""
    out: set[int] = set()
    for part in listed.split(","):
        first, _, last = part.partition("-")
        out |= set(range(int(first), int(last or first) + 1))
    return out


TWO = ["cuda:0", "cuda:1"]
FOUR = ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]


@pytest.mark.parametrize(
    "backend",
    [
        {"devices": TWO, "mode": "static", "max_batch_size": 8},
        # the pipelined loop's events on the replica's own GPU (cuda:1's were once on cuda:0's)
        {"devices": TWO, "mode": "static", "max_batch_size": 8, "compile": True},
        {"devices": TWO, "tensor_parallel": 2, "mode": "static", "max_batch_size": 8},
        # the all-reduces and the vocabulary's gather inside the decode step's CUDA graph
        {"devices": TWO, "tensor_parallel": 2, "mode": "static", "max_batch_size": 8,
         "compile": True},
        {"devices": FOUR, "tensor_parallel": 4, "mode": "static", "max_batch_size": 8,
         "compile": True},
        {"devices": FOUR, "tensor_parallel": 2, "mode": "static", "max_batch_size": 8},
    ],
    ids=["two_replicas", "two_replicas_compiled", "tp2", "tp2_compiled", "tp4_compiled", "two_replicas_of_tp2"],
)  # fmt: skip
def test_several_gpus_as_replicas_or_tensor_parallel_groups(tmp_path, backend):
    """NCCL between a group's GPUs: every token stamped, each replica or rank on its own
    device and its own CPUs, and the per-GPU memory of a split model about 1/n of one GPU's
    (the vocabulary split too: llama-3.2-1b's tied embedding is embedding_rowwise in
    transformers 5.17's plan)."""
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < len(backend["devices"]):
        pytest.skip(f"needs {len(backend['devices'])} CUDA devices")
    m = _run(
        tmp_path, {**backend, "device": "auto"}, {"arrival": {"kind": "burst"}, "requests": 16}
    )
    assert m["status"] == "ok" and m["requests"]["completed"] == 16, m.get("harness")
    assert m["latency_ms"]["itl"]["count"] == 16 * 15
    b = m["backend"]
    tp = backend.get("tensor_parallel", 1)
    if tp > 1:
        split = b["tensor_parallel"]
        assert split["size"] == tp and split["vocabulary_rows"] == 128256 // tp
        assert split["nccl_env"].get("NCCL_NVLS_ENABLE") in ("0", None)
        assert split["all_reduce"].startswith("one-shot over symmetric memory"), split
        assert b["decode_loop"] == ("pipelined" if backend.get("compile") else "generate()")
        # 1.24 B bf16 parameters are ~2.5 GB whole; one rank's part, a cache and activations
        assert 2500 / tp < m["peak_mem_mb"] < 2500 / tp + 1200
    if len(backend["devices"]) > tp:
        groups = [backend["devices"][i : i + tp] for i in range(0, len(backend["devices"]), tp)]
        assert [r["devices"] for r in b["replicas"]] == groups
        assert all(r["requests"] > 0 for r in b["replicas"])
        blocks = [_cpus(r["cpus"]) for r in b["replicas"]]
        assert not set.intersection(*blocks), blocks  # each engine on CPUs of its own
        # the same model on the same kind of GPU: each replica's step is the other's, and a
        # token's gap is a step (stamps taken when the replica's own GPU finished the step)
        steps = [r["decode_step_ms"] for r in b["replicas"]]
        assert max(steps) < 1.3 * min(steps), steps
        assert 0.7 < m["latency_ms"]["itl"]["p50"] / max(steps) < 1.3, (steps, m["latency_ms"])
    assert len(m["gpu"]["devices"]) >= len(backend["devices"])  # each GPU sampled


def test_a_batch_size_sweep_of_a_compiled_tensor_parallel_model(tmp_path):
    """``sweep --batch-sizes`` with tensor_parallel: each point's batches on both ranks."""
    import subprocess
    import sys

    import yaml

    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    path = tmp_path / "s.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "tp-sweep",
                "backend": {"kind": "transformers", "model": "dummy:llama-3.2-1b",
                            "devices": TWO, "tensor_parallel": 2, "compile": True,
                            "mode": "static", "max_batch_size": 4},
                "workload": {"input_tokens": 64, "output_tokens": 16},
                "load": {"arrival": {"kind": "burst"}, "requests": 32},
            }
        )
    )  # fmt: skip
    out = tmp_path / "sw"
    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "sweep", str(path), "--batch-sizes", "1,4",
         "--batches-per-point", "4", "-o", str(out), "-q"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    points = json.loads((out / "sweep.json").read_text())["points"]
    assert [p["metrics"]["requests"]["completed"] for p in points] == [4, 16]
    assert all(p["metrics"]["backend"]["tensor_parallel"]["size"] == 2 for p in points)


def test_a_profile_window_on_chat_traffic_is_said_to_perturb_not_overload(tmp_path):
    """chat-gpu.yml with a 2 s profiler capture: the engine slows while torch's
    profiler records (and while it stops), and near capacity the backlog may not drain. The
    result says what the capture cost, flags every request sent until the backlog drained,
    and calls the run perturbed rather than overloaded where it was steady outside it."""
    from loadtest.config.loading import load_scenario
    from loadtest.session import run_scenario

    loaded = load_scenario(
        "scenarios/chat-gpu.yml",
        # 6 req/s: under this engine's capacity on every H100 host lent so far (7 was not on
        # a slower one: 6.4 delivered), so the run is steady without a capture; the capture
        # opens 10 s into the window, so the run is judged on the part before it
        ["load.duration=40s", "load.arrival.rate=6", "profile={start: 20s, duration: 2s}"],
    )
    m = run_scenario(loaded, tmp_path / "run").metrics
    p = m["profile"]
    assert p["profiler"].startswith("torch.profiler"), p
    cost = p["perturbation"]
    assert cost["asked_s"] == 2.0 and cost["lasted_s"] >= 2.0
    assert p["requests_flagged"] > 0
    detail = (m["stability"], cost, m["validity"]["warnings"])
    assert not any(w.startswith("overloaded") for w in m["validity"]["warnings"]), detail
    said = m["validity"]["warnings"] + m["stability"]["reasons"]
    b0 = cost["backlog_at_open"] or 0
    if cost["backlog_peak"] > b0 + 3 * (b0 + 1) ** 0.5:  # past a queue's own wander: a backlog
        # said, with its cost: as a warning, or as why an otherwise steady run is perturbed
        assert any("the profiler's capture lasted" in w for w in said), said
