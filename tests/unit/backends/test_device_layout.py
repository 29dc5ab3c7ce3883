"""Several devices: how a spec lays engines out, what it refuses, and how requests are routed."""

from __future__ import annotations

import pytest

from loadtest.backends.transformers.replicas import ReplicaRouter, merge_facts
from loadtest.config.transformers_spec import TransformersSpec
from loadtest.core.step_accounting import StepAccounting
from tests.conftest import refused_backend_output


def spec(**fields) -> TransformersSpec:
    return TransformersSpec(model="dummy:tiny-llama", **fields)


@pytest.mark.parametrize(
    "fields, groups",
    [
        ({}, [("auto",)]),
        ({"device": "cuda:1"}, [("cuda:1",)]),
        ({"replicas": 2}, [("cuda:0",), ("cuda:1",)]),
        ({"replicas": 2, "device": "cuda:2"}, [("cuda:2",), ("cuda:3",)]),
        ({"tensor_parallel": 2}, [("cuda:0", "cuda:1")]),
        ({"replicas": 2, "tensor_parallel": 2}, [("cuda:0", "cuda:1"), ("cuda:2", "cuda:3")]),
        ({"tensor_parallel": 2, "device": "cpu"}, [("cpu", "cpu")]),
        ({"devices": ["cuda:3", "cuda:1"]}, [("cuda:3",), ("cuda:1",)]),
        ({"devices": ["cuda:0", "cuda:1", "cuda:2", "cuda:3"], "tensor_parallel": 2},
         [("cuda:0", "cuda:1"), ("cuda:2", "cuda:3")]),
    ],
)  # fmt: skip
def test_a_spec_lays_its_engines_out_in_groups_of_tensor_parallel(fields, groups):
    assert spec(**fields).device_groups() == groups


@pytest.mark.parametrize(
    "backend, field, said",
    [
        ({"devices": ["cuda:0"], "replicas": 2}, "backend.replicas", "devices or replicas"),
        ({"devices": ["cuda:0"], "device": "cuda:0"}, "backend.device", "device (one)"),
        ({"devices": ["cuda:0", "cuda:1", "cuda:2"], "tensor_parallel": 2}, "backend.devices",
         "3 devices do not split into tensor-parallel groups of 2"),
        ({"devices": ["cuda:0", "cuda:0"]}, "backend.devices", "cuda:0 twice"),
        ({"tensor_parallel": 2, "mode": "continuous"}, "backend.tensor_parallel",
         "use mode static or single"),
        # tiny-llama: 4 heads, 2 KV heads: 4 ways leaves half a KV head each
        ({"tensor_parallel": 4}, "backend.tensor_parallel",
         "num_key_value_heads = 2 does not split over 4 devices"),
        ({"devices": ["gpu0"]}, "backend.devices.0", "should match pattern"),
    ],
)  # fmt: skip
def test_layouts_that_do_not_go_together_are_refused_by_file_line_and_field(
    tmp_path, backend, field, said
):
    output = refused_backend_output(tmp_path, backend)
    assert field in output and said in output, output


def test_a_model_folder_that_does_not_split_is_refused_before_loading(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"num_attention_heads": 6, "num_key_value_heads": 3}')
    problems = TransformersSpec(model=str(folder), tensor_parallel=2).preflight(tmp_path)
    assert problems == [
        (("backend", "tensor_parallel"), f"{folder}: num_key_value_heads = 3 does not split over 2 devices")
    ]  # fmt: skip


def test_requests_go_to_the_least_loaded_replica_and_ties_go_in_turn():
    router = ReplicaRouter.__new__(ReplicaRouter)
    router.outstanding, router._turn = [0, 0, 0], 0
    picks = []
    for _ in range(4):  # all idle: in turn
        i = router.choose()
        picks.append(i)
        router.outstanding[i] += 1
    assert picks == [0, 1, 2, 0]
    router.outstanding = [2, 1, 1]  # replica 0 busier; 1 and 2 tie: the next in turn is 1
    assert router.choose() == 1
    router.outstanding = [0, 3, 0]
    assert router.choose() == 2  # the turn is past 1: of the least loaded, 2 comes first


def test_replica_facts_add_up_to_one_engines_with_the_largest_peak():
    parts = [
        {"batches": 3, "peak_mem_mb": 100.0, "stamp_mismatches": 0,
         "roofline_acct": {"decode_steps": 10, "decode_s": 0.5, "decode_rows": 40}},
        {"batches": 2, "peak_mem_mb": 150.0, "stamp_mismatches": 1,
         "roofline_acct": {"decode_steps": 30, "decode_s": 1.0, "decode_rows": 60}},
    ]  # fmt: skip
    merged = merge_facts(parts)
    assert merged["batches"] == 5 and merged["stamp_mismatches"] == 1
    assert merged["peak_mem_mb"] == 150.0  # one GPU's worst, not a sum over GPUs
    # the step accounting summed, field by field (those a replica did not give count zero)
    total = StepAccounting(decode_steps=40, decode_s=1.5, decode_rows=100)
    assert StepAccounting(**merged["roofline_acct"]) == total


@pytest.mark.parametrize(
    "name, current, want",
    [("cuda", 0, "cuda:0"), ("cuda", 1, "cuda:1"), ("cuda:1", 0, "cuda:1"), ("auto", 0, "cuda:0")],
)
def test_every_cuda_device_a_worker_resolves_has_an_index(monkeypatch, name, current, want):
    """``device: cuda`` crashed every engine on the GPU host: the worker makes its GPU the
    current device, and torch.cuda.set_device refuses a device with no index. Whatever the
    name, the resolved CUDA device is indexed (a bare ``cuda``: the current device)."""
    torch = pytest.importorskip("torch")
    from loadtest.backends.transformers.loading import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    device = resolve_device(name)
    assert device.index is not None and str(device) == want
