"""Where a local engine ran, in every report: replicas and routing, each replica's share and
decode step against the floor, the split and its all-reduce, the decode loop; and a line a GPU
in the terminal."""

from __future__ import annotations

from loadtest.reporters.inside import gpu_lines
from loadtest.reporters.placement import placement_rows
from loadtest.results.model import (
    BackendFacts,
    DecodeRoof,
    Dist,
    GpuDevice,
    GpuSection,
    RooflineSection,
)


def test_two_replicas_of_tp2_show_their_routing_share_step_and_split():
    backend = BackendFacts.model_validate(
        {
            "kind": "transformers",
            "routing": "least outstanding requests (ties in turn)",
            "tensor_parallel": {
                "size": 2,
                "per_rank": {"num_attention_heads": 16, "num_key_value_heads": 4},
                "all_reduce": "one-shot over symmetric memory up to 1024 KiB, NCCL above",
            },
            "replicas": [
                {"index": 0, "devices": ["cuda:0", "cuda:1"], "cpus": "1-15", "requests": 190,
                 "batches": 7, "decode_step_ms": 5.0, "peak_mem_mb": 8097.6},
                {"index": 1, "devices": ["cuda:2", "cuda:3"], "cpus": "16-30", "requests": 194,
                 "batches": 7, "decode_step_ms": 5.5},
            ],
            "decode_loop": "pipelined",
        }
    )  # fmt: skip
    roofline = RooflineSection.model_construct(decode=DecodeRoof.model_construct(floor_ms=2.5))
    rows = placement_rows(backend, roofline)
    assert rows == [
        ("engines", "2 replicas of TP2, routed to the least outstanding requests (ties in turn)"),
        ("replica 0", "cuda:0,cuda:1; CPUs 1-15; 190 requests; 7 batches; "
                      "decode step 5 ms (2.0x the floor); peak 8,098 MB"),
        ("replica 1", "cuda:2,cuda:3; CPUs 16-30; 194 requests; 7 batches; "
                      "decode step 5.5 ms (2.2x the floor)"),
        ("tensor parallel", "TP2 (num_attention_heads 16, num_key_value_heads 4 a rank)"),
        ("all-reduce", "one-shot over symmetric memory up to 1024 KiB, NCCL above"),
        ("decode loop", "pipelined"),
    ]  # fmt: skip


def test_one_engine_says_its_device_cpus_and_why_it_decodes_through_generate():
    backend = BackendFacts.model_validate(
        {"kind": "transformers", "device": "cuda:0", "cpus": "1-31", "decode_loop": "generate()",
         "decode_loop_off": "its decode steps are not padded (pad_decode)"}
    )  # fmt: skip
    assert placement_rows(backend, None) == [
        ("engine", "cuda:0, CPUs 1-31"),
        ("decode loop", "generate() (its decode steps are not padded (pad_decode))"),
    ]
    assert placement_rows(BackendFacts(kind="openai"), None) == []  # a served model: none
    assert placement_rows(None, None) == []


def test_the_terminal_has_a_line_a_gpu_with_its_throttle_reasons():
    def dist(mean: float) -> Dist:
        return Dist(mean=mean, p50=mean, p95=mean, max=mean)

    gpu = GpuSection(
        available=True,
        devices=[
            GpuDevice(index=0, name="NVIDIA H100", utilization_gpu_pct=dist(95.85),
                      peak_memory_mib=16093.6, power_w=dist(467.8), clocks_sm_mhz=dist(1950.0),
                      throttle_reasons_seen=["sw_power_cap"]),
            GpuDevice(index=1, name="NVIDIA H100"),
        ],
    )  # fmt: skip
    assert gpu_lines(gpu) == [
        "GPU 0 NVIDIA H100: kernel-active 96%, peak 16,094 MiB, power 468 W, SM 1950 MHz, "
        "throttled: sw_power_cap",
        "GPU 1 NVIDIA H100: kernel-active -, peak -, power -, SM -, throttled: none",
    ]
    assert gpu_lines(GpuSection.unavailable("no NVML")) == []
