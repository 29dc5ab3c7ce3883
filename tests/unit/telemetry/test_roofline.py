"""Roofline arithmetic against hand-computed values for Llama-3.2-1B's shape."""

from __future__ import annotations

import json

import pytest

from loadtest.config.model_shapes import DUMMY_ARCHITECTURES
from loadtest.core.step_accounting import StepAccounting
from loadtest.results.model import (
    DecodeRoof,
    Diagnosis,
    Dist,
    GpuDevice,
    GpuSection,
    KernelSummary,
    Operator,
    Peaks,
    ProfileSection,
    RooflineSection,
)
from loadtest.telemetry import roofline

LLAMA_1B_PARAMS = 1_235_814_400  # Llama-3.2-1B, tied embeddings (the published count)


def test_llama_3_2_1b_costs_by_hand():
    shape = roofline.model_shape(DUMMY_ARCHITECTURES["llama-3.2-1b"], 2 * LLAMA_1B_PARAMS, 2)
    # per layer: q 2048x(32x64) + k,v 2x 2048x(8x64) + o (32x64)x2048 = 10_485_760; MLP 3 x 2048 x 8192
    # = 50_331_648; x16 layers + the LM head 128_256 x 2048 = 1_235_746_816 matmul weights, 2 FLOPs each
    assert (
        shape.linear_flops_per_token
        == 2 * (16 * (10_485_760 + 50_331_648) + 128_256 * 2048)
        == 2_471_493_632
    )
    assert shape.attention_flops_per_token_per_context == 4 * 16 * 32 * 64 == 131_072
    assert shape.kv_bytes_per_token == 2 * 16 * 8 * 64 * 2 == 32_768
    assert shape.weight_bytes == 2_471_628_800


def test_mbu_mfu_by_hand():
    shape = roofline.model_shape(DUMMY_ARCHITECTURES["llama-3.2-1b"], 2 * LLAMA_1B_PARAMS, 2)
    # 100 decode steps of batch 8 in 0.5 s, prompts padded to 128: context 128 + k at step k
    acct = StepAccounting(
        decode_steps=100,
        decode_s=0.5,
        decode_rows=800,
        decode_ctx_sum=8 * sum(128 + k for k in range(1, 101)),
        prefill_tokens=1000,
        prefill_s=0.01,
        prefill_attn_pairs=8 * (125 * 126 // 2),
        prefill_batches=1,
    )
    assert acct.decode_ctx_sum == 142_800
    r = roofline.analyse(shape, acct, Peaks(bw_gb_s=3350, tflops=989, source="test"))
    d = r.decode
    bytes_moved = 100 * 2_471_628_800 + 142_800 * 32_768  # = 251_842_150_400
    assert d.bytes_per_step == round(bytes_moved / 100) == 2_518_421_504
    assert d.achieved_gb_s == pytest.approx(503.684, abs=1e-3)
    assert d.mbu == pytest.approx(503.6843 / 3350, abs=1e-4)  # 0.1504
    flops = 800 * 2_471_493_632 + 142_800 * 131_072  # 1.9959e12 in 0.5 s
    assert d.mfu == pytest.approx(flops / 0.5 / 989e12, abs=1e-5)  # 0.00404
    assert d.floor_ms == pytest.approx(2_518_421_504 / 3.35e12 * 1e3, abs=1e-4)  # 0.7518 ms
    assert d.step_ms == 5.0 and d.batch_mean == 8.0
    assert d.intensity_flop_per_byte == pytest.approx(flops / bytes_moved, abs=1e-4)  # 7.925
    p = r.prefill
    pre_flops = 1000 * 2_471_493_632 + 63_000 * 131_072
    assert p.tokens_per_s == 100_000.0 and p.mfu == pytest.approx(
        pre_flops / 0.01 / 989e12, abs=1e-5
    )
    # one batch: the weights read once, 1000 tokens' KV written
    pre_bytes = 2_471_628_800 + 1000 * 32_768
    assert p.intensity_flop_per_byte == pytest.approx(pre_flops / pre_bytes, abs=1e-4)  # 993.5


def test_peaks_prefer_a_calibration_over_the_datasheet(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert roofline.peaks_for("NVIDIA H100 80GB HBM3").bw_gb_s == 3350
    assert roofline.peaks_for("NVIDIA H100 PCIe").bw_gb_s == 2000
    assert roofline.peaks_for("NVIDIA H200").bw_gb_s == 4800
    assert roofline.peaks_for("cpu") is None
    (tmp_path / "loadtest").mkdir()
    (tmp_path / "loadtest" / "calibration.json").write_text(
        json.dumps({"GPU-abc": {"bw_gb_s": 3012.0, "tflops": 700.0, "measured_at": "today"}})
    )
    p = roofline.peaks_for("NVIDIA H100 80GB HBM3", "GPU-abc")
    assert (p.bw_gb_s, p.tflops) == (3012.0, 700.0) and "calibrate" in p.source


def diagnose(decode: dict, gpu_active_pct: float | None, profile: dict | None = None) -> Diagnosis:
    """The diagnosis of a run whose decode and first GPU read as given (the rest unmeasured)."""
    roof = RooflineSection.model_construct(decode=DecodeRoof.model_construct(**decode))
    gpu = None
    if gpu_active_pct is not None:
        util = Dist(mean=gpu_active_pct, p50=gpu_active_pct, p95=gpu_active_pct, max=gpu_active_pct)
        device = GpuDevice.model_construct(utilization_gpu_pct=util)
        gpu = GpuSection(available=True, devices=[device])
    prof = None
    if profile is not None:
        kernels = profile.get("kernel_summary")
        prof = ProfileSection.model_construct(
            kernel_summary=KernelSummary.model_construct(**kernels) if kernels else None,
            host_heavy_ops=[
                Operator.model_construct(**o) for o in profile.get("host_heavy_ops", [])
            ],
        )
    return roofline.diagnose(roofline.Signals.of(roof, gpu, prof))


def test_diagnosis():
    launch = diagnose(
        {"mbu": 0.05, "mfu": 0.001, "step_ms": 10, "floor_ms": 0.8, "batch_mean": 1},
        35,
    )
    assert launch.verdict == "host/launch-bound" and any(
        "CUDA graphs" in r for r in launch.remedies
    )
    memory = diagnose(
        {"mbu": 0.72, "mfu": 0.01, "step_ms": 1.1, "floor_ms": 0.8, "batch_mean": 1},
        98,
    )
    assert memory.verdict == "memory-bound (decode)"
    short = diagnose(
        {"mbu": 0.1, "mfu": 0.001, "step_ms": 8, "floor_ms": 0.8, "batch_mean": 1},
        None,
        {"kernel_summary": {"launches": 1000, "under_10us_share": 0.9}},
    )
    assert (
        short.verdict == "host/launch-bound"
        and "90% of profiled CUDA kernels ran under 10 µs" in short.evidence
    )


def test_a_profile_names_the_host_heavy_operators_and_the_remedy_for_each():
    from loadtest.backends.transformers.profiling import host_heavy

    # the eager chat run's profile window, in µs: cuDNN attention 1.33 s of host for 10.6 ms of
    # GPU; matmuls busy on the GPU; a small host-only op under 5% of the host's time
    ops = [
        {
            "name": "aten::_cudnn_attention_forward",
            "self_cpu_time_us": 1_330_000,
            "self_cuda_time_us": 10_600,
            "calls": 160,
        },
        {
            "name": "aten::mm",
            "self_cpu_time_us": 90_000,
            "self_cuda_time_us": 130_000,
            "calls": 1130,
        },
        {"name": "aten::item", "self_cpu_time_us": 300_000, "self_cuda_time_us": 0, "calls": 160},
        {"name": "aten::view", "self_cpu_time_us": 20_000, "self_cuda_time_us": 0, "calls": 9000},
    ]
    heavy = host_heavy(ops)
    assert [o["name"] for o in heavy] == ["aten::_cudnn_attention_forward", "aten::item"]
    d = diagnose(
        {"mbu": 0.017, "mfu": 0.001, "step_ms": 49.7, "floor_ms": 0.8, "batch_mean": 16},
        9,
        {"host_heavy_ops": heavy},
    )
    assert d.verdict == "host/launch-bound"
    assert d.host_heavy_ops == ["aten::_cudnn_attention_forward", "aten::item"]
    assert (
        "aten::_cudnn_attention_forward: 1330.0 ms of host time for 10.60 ms on the GPU (160 calls)"
        in d.evidence
    )
    assert "sdpa_backends" in d.remedies[0] and "copies or syncs" in d.remedies[1]


def test_continuous_mode_is_estimated_from_the_runs_own_figures():
    # mean ITL 20 ms over a 10 s window: 500 steps; 400 tok/s x 0.02 s = 8 rows a step;
    # context 100 input + 40 output / 2 = 120 tokens a row
    acct = roofline.estimate_from_latencies(
        itl_mean_ms=20.0,
        output_tokens_per_s=400.0,
        window_s=10.0,
        completed=100,
        input_tokens=10_000,
        output_tokens=4_000,
    )
    assert acct == StepAccounting(
        decode_steps=500, decode_s=10.0, decode_rows=4000, decode_ctx_sum=480_000
    )
    r = roofline.analyse(
        roofline.model_shape(DUMMY_ARCHITECTURES["llama-3.2-1b"], 2 * LLAMA_1B_PARAMS, 2),
        acct,
        Peaks(bw_gb_s=3350, tflops=989, source="test"),
    )
    assert r.decode.step_ms == 20.0 and r.decode.batch_mean == 8.0 and r.prefill is None


def test_the_70b_preset_has_llama_3_1_70b_parameters():
    """Built on the meta device (no memory): 80 layers of attention (GQA, 8 KV heads) and MLP,
    untied embeddings, counted by hand."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = dict(DUMMY_ARCHITECTURES["llama-3.1-70b"])
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    per_layer = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192  # 855,654,400
    total = 80 * per_layer + 2 * 128256 * 8192 + 8192
    assert sum(p.numel() for p in model.parameters()) == total == 70_553_706_496
