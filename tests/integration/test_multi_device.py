"""Replicas and tensor parallelism on the CPU: the process layout (gloo in place of NCCL) with
the tiny Llama, through the real loading path. The same code runs on GPUs with NCCL."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import threading
import time

import pytest

pytest.importorskip("transformers")

from loadtest.config.loading import load_scenario
from loadtest.session import run_scenario
from tests.conftest import LENIENT, write_scenario


def _rank(rank: int, port: int, model_dir: str, out) -> None:
    import torch

    from loadtest.backends.transformers.layout import Layout
    from loadtest.backends.transformers.loading import load_model
    from loadtest.config.transformers_spec import TransformersSpec

    spec = TransformersSpec(device="cpu", dtype="float32", seed=0, model=model_dir,
                            trust_remote_code=False, mode="static", compile=False,
                            max_batch_size=4)  # fmt: skip
    layout = Layout(rank, 2, ("cpu", "cpu"), port, 2)
    model, _, info = load_model(spec, "/", layout)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    with torch.inference_mode():
        logits = model(ids).logits
        tokens = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8)
    # plain lists: a tensor would travel as shared memory this process frees when it exits
    out.put((rank, logits.tolist(), tokens.tolist(), info["parameters"], info["tensor_parallel"]))


def test_two_ranks_compute_the_full_models_logits_and_tokens(tiny_model_dir):
    import torch
    import transformers

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, str(tiny_model_dir), out)) for r in (0, 1)]
    for p in procs:
        p.start()
    got = dict((r[0], r[1:]) for r in (out.get(timeout=120), out.get(timeout=120)))
    for p in procs:
        p.join(30)
    full = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    with torch.inference_mode():
        want = full(ids).logits
        tokens = full.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8)
    for rank in (0, 1):  # every rank holds the whole (all-reduced) result
        logits, generated, params, split = got[rank]
        logits = torch.tensor(logits)
        assert torch.allclose(logits, want, atol=1e-5), (logits - want).abs().max()
        assert generated == tokens.tolist()
    # each rank holds half of every attention and MLP matrix, half the vocabulary's rows (of
    # the embedding and lm_head, untied here; rounded up), and all of the rest
    h, inter, layers, vocab = 32, 64, 2, full.config.vocab_size
    kv = 2 * h // 4 * 2  # 2 KV heads of head_dim 8, for k and v: 16 columns each
    sharded = layers * (h * h + kv * h + h * h + 3 * h * inter)
    whole = sum(p.numel() for p in full.parameters())
    assert whole - sharded // 2 - 2 * vocab * h + 2 * -(-vocab // 2) * h == got[0][2]
    assert split["per_rank"] == {
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 32,
    }
    assert split["nccl_env"]["NCCL_NVLS_ENABLE"] == os.environ.get("NCCL_NVLS_ENABLE", "0")


def scenario(tmp_path, model_dir, backend: dict, load: dict | None = None):
    return write_scenario(
        tmp_path,
        {
            "name": "devices",
            "backend": {"kind": "transformers", "model": str(model_dir), "max_batch_size": 4,
                        **backend},
            "workload": {"input_tokens": {"dist": "uniform", "min": 4, "max": 24},
                         "output_tokens": 6},
            "load": {"validity": LENIENT,
                     **(load or {"arrival": {"kind": "poisson", "rate": 20}, "duration": "3s"})},
            "telemetry": {"gpu": False},
        },
    )  # fmt: skip


def _engines() -> list[str]:
    return sorted(p.name for p in multiprocessing.active_children() if "engine" in p.name)


def test_a_tensor_parallel_group_runs_a_scenario_and_leaves_nothing_behind(
    tmp_path, tiny_model_dir
):
    path = scenario(tmp_path, tiny_model_dir, {"device": "cpu", "tensor_parallel": 2})
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "ok", m["validity"]
    assert m["requests"]["completed"] > 20 and m["requests"]["failed"] == 0
    b = m["backend"]
    assert b["tensor_parallel"]["size"] == 2 and "TP2 on cpu,cpu" in b["name"]
    assert b["tensor_parallel"]["all_reduce"] == (
        "the process group's (NCCL on CUDA, gloo on the CPU): not on CUDA"
    )
    assert _engines() == []  # rank 0 and its follower are gone


def test_replicas_share_the_load_and_each_reports_its_own(tmp_path, tiny_model_dir):
    path = scenario(tmp_path, tiny_model_dir, {"devices": ["cpu", "cpu"]})
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "ok", m["validity"]
    b = m["backend"]
    assert b["routing"].startswith("least outstanding")
    routed = [r["requests"] for r in b["replicas"]]
    assert all(n > 5 for n in routed)  # idle replicas take turns
    assert sum(routed) == m["requests"]["sent"]
    assert sum(r["batches"] for r in b["replicas"]) == b["batches"]
    assert _engines() == []
    # every report says where each replica ran and what it carried
    from loadtest.reporters import markdown
    from loadtest.results.model import RunMetrics

    report = markdown.render(RunMetrics.model_validate(m))
    assert "## Placement" in report
    for r in b["replicas"]:
        assert (
            f"| replica {r['index']} | cpu; CPUs {r['cpus']}; {r['requests']} requests; " in report
        )


def _kill_when_running(name: str, after_s: float) -> None:
    def kill():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = [p for p in multiprocessing.active_children() if p.name == name]
            if found:
                time.sleep(after_s)
                os.kill(found[0].pid, signal.SIGKILL)
                return
            time.sleep(0.1)

    threading.Thread(target=kill, daemon=True).start()


@pytest.mark.parametrize(
    "backend, victim, said",
    [
        ({"device": "cpu", "tensor_parallel": 2}, "loadtest-engine-rank1",
         "tensor-parallel rank 1 of 2 exited"),
        ({"devices": ["cpu", "cpu"]}, "loadtest-engine-replica1",
         "replica 1 (cpu): engine worker exited"),
    ],
)  # fmt: skip
def test_a_lost_rank_or_replica_ends_the_run_with_what_was_measured(
    tmp_path, tiny_model_dir, backend, victim, said
):
    load = {"arrival": {"kind": "poisson", "rate": 20}, "duration": "60s"}
    path = scenario(tmp_path, tiny_model_dir, backend, load)
    _kill_when_running(victim, 12.0)  # loaded and running by then
    started = time.monotonic()
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert time.monotonic() - started < 55  # not the planned minute
    assert m["status"] == "failed" and said in m["harness"]["failure"], m["harness"]
    assert m["requests"]["completed"] > 0
    assert _engines() == []


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_every_rank_names_the_groups_first_missing_device(rank, tiny_model_dir):
    # The harness reports whichever rank fails first, so each must say the same thing.
    import torch

    from loadtest.backends.transformers.layout import Layout
    from loadtest.backends.transformers.loading import load_model

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    # none of them here (a rank given one it has would wait for the others in the group)
    devices = (f"cuda:{count + 1}", f"cuda:{count}", f"cuda:{count + 2}")
    from loadtest.config.transformers_spec import TransformersSpec

    spec = TransformersSpec(device="cpu", dtype="float32", seed=0, model=str(tiny_model_dir))
    with pytest.raises(ValueError, match=rf"^cuda:{count + 1}: this machine has {count} CUDA"):
        load_model(spec, "/", Layout(rank, 3, devices, 0, 3))


def test_gpus_asked_for_on_a_machine_without_them_fail_the_start_saying_so(
    tmp_path, tiny_model_dir
):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    path = scenario(tmp_path, tiny_model_dir, {"tensor_parallel": 2})  # device auto: GPUs
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "failed"
    assert "cuda:0: this machine has 0 CUDA device(s)" in m["backend"]["error"]
    assert _engines() == []


def test_a_batch_size_sweep_runs_on_a_tensor_parallel_group(tmp_path, tiny_model_dir):
    # each point's new max_batch_size reaches rank 0's batcher; the follower runs whatever
    # rank 0 announces, so both step through every point's batches. compile: true pads the
    # decode steps, so both ranks decode pipelined (uncompiled on the CPU), each point's in a
    # cache of its rows
    import json

    from tests.integration.test_cli import cli, write

    data = {
        "name": "tp-sweep",
        "backend": {"kind": "transformers", "model": str(tiny_model_dir), "device": "cpu",
                    "tensor_parallel": 2, "mode": "static", "max_batch_size": 4,
                    "max_wait_ms": 50, "compile": True},
        "workload": {"input_tokens": 8, "output_tokens": 4},
        "load": {"arrival": {"kind": "burst"}, "requests": 64, "warmup_requests": 8,
                 "validity": {**LENIENT, "max_burst_send_share": 1.0}},
        "telemetry": {"gpu": False},
    }  # fmt: skip
    out = tmp_path / "sw"
    r = cli("sweep", write(tmp_path, data), "--batch-sizes", "1,3", "--batches-per-point", "2",
            "-o", out, "-q", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    points = json.loads((out / "sweep.json").read_text())["points"]
    assert [p["metrics"]["requests"]["completed"] for p in points] == [2, 6]
    assert all(p["metrics"]["backend"]["tensor_parallel"]["size"] == 2 for p in points)
    assert [p["metrics"]["backend"]["decode_loop"] for p in points] == ["pipelined"] * 2
    assert _engines() == []
