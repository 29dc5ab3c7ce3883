"""Where the run sits against the hardware: model bandwidth and FLOP utilisation (MBU, MFU).

From the model's shape (a transformers config), per token and per step:

* linear FLOPs per token = 2 x the parameters of every matmul (attention projections, MLP,
  LM head); the embedding lookup is a gather, not a matmul;
* attention FLOPs per token at context c = 4 x layers x heads x head_dim x c (QK^T and AV);
* bytes per decode step = all weight bytes (each step reads every weight once, whatever the
  batch) + the KV cache of every row: 2 x layers x kv_heads x head_dim x dtype bytes per
  context token.

The engine worker times its own steps (single and static modes): prefill = the batch's start to
its first token, each decode step = one token's gap, with the batch size and the context length
of each step. Achieved bandwidth and FLOP/s over those times, divided by the device's peaks,
give MBU and MFU. Peaks come from ``loadtest calibrate`` (measured on this device, cached) or,
failing that, the vendor datasheet table below (dense bf16 tensor FLOP/s, memory bandwidth).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from loadtest.core import outside
from loadtest.core.json_types import JsonObject
from loadtest.core.step_accounting import StepAccounting
from loadtest.telemetry.gpu_section import GpuSection
from loadtest.telemetry.profile_section import Operator, ProfileSection
from loadtest.telemetry.roofline_section import (
    DecodeRoof,
    Diagnosis,
    ModelCosts,
    Peaks,
    PrefillRoof,
    RooflineSection,
)

# NVML device name fragment -> (memory bandwidth GB/s, dense bf16 TFLOP/s); most specific first.
DATASHEET_PEAKS: tuple[tuple[str, float, float], ...] = (
    ("H200", 4800, 989),
    ("H100 NVL", 3900, 835),
    ("H100 PCIe", 2000, 756),
    ("H100", 3350, 989),
    ("GH200", 4000, 989),
    ("A100-SXM4-80GB", 2039, 312),
    ("A100 80GB PCIe", 1935, 312),
    ("A100", 1555, 312),
    ("L40S", 864, 362),
    ("L40", 864, 181),
    ("L4", 300, 121),
    ("A10", 600, 125),
)


CACHE_BYTES = 16 << 20  # the calibration cache: a few devices' peaks


def calibration_path() -> Path:
    """The cache of measured peaks (``loadtest calibrate``), keyed by device inside."""
    base = os.getenv("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "loadtest" / "calibration.json"


def peaks_for(device_name: str | None, uuid: str | None = None) -> Peaks | None:
    """A device's peaks: calibrated if cached, else the datasheet."""
    try:
        cached = json.loads(outside.read_text(calibration_path(), CACHE_BYTES))
    except (OSError, ValueError):  # absent, unreadable, not a file, not JSON: no cache
        cached = {}
    for key in (uuid, device_name):
        if key and key in cached:
            c = cached[key]
            return Peaks(
                bw_gb_s=c["bw_gb_s"],
                tflops=c["tflops"],
                source=f"loadtest calibrate ({c.get('measured_at')})",
            )
    for fragment, bw, tflops in DATASHEET_PEAKS:
        if device_name and fragment in device_name:
            return Peaks(
                bw_gb_s=bw,
                tflops=tflops,
                source=f"datasheet ({fragment}: dense bf16, HBM/GDDR bandwidth)",
            )
    return None


class ShapeConfig(BaseModel):
    """The fields of a model's config that its costs follow from (the rest ignored)."""

    model_config = ConfigDict(extra="ignore")

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int
    vocab_size: int
    hidden_act: str | None = "silu"
    model_type: str | None = None


def model_shape(config: JsonObject, parameter_bytes: int, dtype_bytes: int) -> ModelCosts:
    """The per-token and per-step costs of a decoder-only transformer, from its config."""
    c = ShapeConfig.model_validate(config)
    h, layers, heads = c.hidden_size, c.num_hidden_layers, c.num_attention_heads
    kv_heads = c.num_key_value_heads or heads
    head_dim = c.head_dim or h // heads
    inter, vocab = c.intermediate_size, c.vocab_size
    gated = c.hidden_act in ("silu", "swiglu", "gelu_pytorch_tanh") or c.model_type in (
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma2",
    )
    attn_params = h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h
    mlp_params = (3 if gated else 2) * h * inter
    matmul_params = layers * (attn_params + mlp_params) + vocab * h  # + the LM head
    return ModelCosts(
        linear_flops_per_token=2 * matmul_params,
        attention_flops_per_token_per_context=4 * layers * heads * head_dim,
        weight_bytes=parameter_bytes,
        kv_bytes_per_token=2 * layers * kv_heads * head_dim * dtype_bytes,
    )


ESTIMATED_NOTE = (
    "continuous mode: the manager's steps are not timed; decode estimated from the harness's "
    "figures (step = mean ITL, batch = output tok/s x step, context = mean input + half the mean "
    "output); prefill not estimated"
)


def estimate_from_latencies(
    itl_mean_ms: float | None,
    output_tokens_per_s: float | None,
    window_s: float | None,
    completed: int,
    input_tokens: int | None,
    output_tokens: int | None,
) -> StepAccounting:
    """Step accounting reconstructed from a run's own figures, where the engine cannot time its
    steps: each step yields one token for each request in the batch, so over the window
    steps = window / mean ITL and rows per step = output tok/s x mean ITL (Little's law on tokens)."""
    if not itl_mean_ms or not output_tokens_per_s or not window_s or not completed:
        return StepAccounting()
    step_s = itl_mean_ms / 1000
    steps = window_s / step_s
    batch = output_tokens_per_s * step_s
    context = (input_tokens or 0) / completed + (output_tokens or 0) / completed / 2
    return StepAccounting(
        decode_steps=round(steps),
        decode_s=window_s,
        decode_rows=round(batch * steps),
        decode_ctx_sum=round(batch * steps * context),
    )


def analyse(shape: ModelCosts, acct: StepAccounting, peaks: Peaks | None) -> RooflineSection:
    """MBU/MFU for decode and prefill from the worker's step accounting (``acct``)."""
    return RooflineSection(
        peaks=peaks,
        model=shape,
        **_decode(shape, acct, peaks),
        **_prefill(shape, acct, peaks),
    )


def _decode(shape: ModelCosts, acct: StepAccounting, peaks: Peaks | None) -> dict[str, DecodeRoof]:
    steps, decode_s = acct.decode_steps, acct.decode_s
    if not steps or decode_s <= 0:
        return {}
    ctx, rows = acct.decode_ctx_sum, acct.decode_rows
    bytes_moved = steps * shape.weight_bytes + ctx * shape.kv_bytes_per_token
    flops = rows * shape.linear_flops_per_token + ctx * shape.attention_flops_per_token_per_context
    step_s = decode_s / steps
    decode = DecodeRoof(
        steps=steps,
        step_ms=round(1e3 * step_s, 4),
        batch_mean=round(rows / steps, 3),
        bytes_per_step=round(bytes_moved / steps),
        achieved_gb_s=round(bytes_moved / decode_s / 1e9, 3),
        achieved_tflops=round(flops / decode_s / 1e12, 4),
        intensity_flop_per_byte=round(flops / bytes_moved, 4),
    )
    if peaks:
        decode.mbu = round(bytes_moved / decode_s / (peaks.bw_gb_s * 1e9), 4)
        decode.mfu = round(flops / decode_s / (peaks.tflops * 1e12), 5)
        decode.floor_ms = round(1e3 * (bytes_moved / steps) / (peaks.bw_gb_s * 1e9), 4)
    return {"decode": decode}


def _prefill(
    shape: ModelCosts, acct: StepAccounting, peaks: Peaks | None
) -> dict[str, PrefillRoof]:
    tokens, prefill_s = acct.prefill_tokens, acct.prefill_s
    if not tokens or prefill_s <= 0:
        return {}
    flops = (
        tokens * shape.linear_flops_per_token
        + acct.prefill_attn_pairs * shape.attention_flops_per_token_per_context
    )
    batches = acct.prefill_batches
    prefill = PrefillRoof(
        batches=batches,
        tokens=tokens,
        tokens_per_s=round(tokens / prefill_s, 1),
        achieved_tflops=round(flops / prefill_s / 1e12, 4),
    )
    if batches:
        # each batch reads the weights once and writes each token's KV
        moved = batches * shape.weight_bytes + tokens * shape.kv_bytes_per_token
        prefill.intensity_flop_per_byte = round(flops / moved, 4)
    if peaks:
        prefill.mfu = round(flops / prefill_s / (peaks.tflops * 1e12), 5)
    return {"prefill": prefill}


@dataclass(frozen=True)
class Signals:
    """What a diagnosis reads: the roofline's figures, the GPU's activity over the window and
    the profile window's kernels and host-heavy operators (None where not measured)."""

    mbu: float | None = None
    mfu: float | None = None
    step_ms: float | None = None
    floor_ms: float | None = None
    batch_mean: float | None = None
    prefill_mfu: float | None = None
    prefill_tokens_per_s: float | None = None
    gpu_active_pct: float | None = None
    sm_active_pct: float | None = None
    short_kernel_share: float | None = None
    host_heavy_ops: tuple[Operator, ...] = ()

    @classmethod
    def of(
        cls, roofline: RooflineSection, gpu: GpuSection | None, profile: ProfileSection | None
    ) -> Signals:
        """From a run's ``roofline``, ``gpu`` and ``profile`` sections."""
        decode, prefill = roofline.decode, roofline.prefill
        device = gpu.devices[0] if gpu is not None and gpu.devices else None
        util = device.utilization_gpu_pct if device else None
        sm = device.gpm_sm_activity_pct if device else None
        kernels = profile.kernel_summary if profile else None
        return cls(
            mbu=decode.mbu if decode else None,
            mfu=decode.mfu if decode else None,
            step_ms=decode.step_ms if decode else None,
            floor_ms=decode.floor_ms if decode else None,
            batch_mean=decode.batch_mean if decode else None,
            prefill_mfu=prefill.mfu if prefill else None,
            prefill_tokens_per_s=prefill.tokens_per_s if prefill else None,
            gpu_active_pct=util.mean if util else None,
            sm_active_pct=sm.mean if sm else None,
            short_kernel_share=kernels.under_10us_share if kernels else None,
            host_heavy_ops=tuple((profile.host_heavy_ops if profile else None) or ()),
        )


def diagnose(s: Signals) -> Diagnosis:
    """The verdict that fits the signals, the evidence for it, and the remedies that fit: when
    a profile window names host-heavy operators, the remedy for each."""
    evidence = _evidence(s)
    heavy = list(s.host_heavy_ops)
    if _launch_bound(s):
        verdict = "host/launch-bound"
        remedies = [_remedy(op) for op in heavy]
        evidence += [
            f"{op.name}: {op.self_cpu_time_us / 1e3:.1f} ms of host time for "
            f"{op.self_cuda_time_us / 1e3:.2f} ms on the GPU ({op.calls} calls)"
            for op in heavy
        ]
        remedies += LAUNCH_BOUND_REMEDIES
        if not heavy:
            remedies.append("profile a window (profile:) to name the operators that cost the host")
    elif s.mbu is not None and s.mbu >= 0.5:
        verdict, remedies = "memory-bound (decode)", list(MEMORY_BOUND_REMEDIES)
    elif s.prefill_mfu is not None and s.prefill_mfu >= 0.4:
        verdict, remedies = "compute-bound (prefill)", list(COMPUTE_BOUND_REMEDIES)
    elif s.mbu is not None:
        verdict = "between the roofs (neither bandwidth nor compute saturated)"
        remedies = ["profile a window (profile:) to see where a step's time goes"]
    else:
        verdict, remedies = "not enough data", []
    return Diagnosis(
        verdict=verdict,
        evidence=evidence,
        remedies=list(dict.fromkeys(remedies)),
        host_heavy_ops=[o.name for o in heavy],
    )


LAUNCH_BOUND_REMEDIES = [
    "capture decode in CUDA graphs (backend.compile: true: static cache + torch.compile)",
    "larger batches (more work per launch)",
    "fewer host syncs per step; fused kernels",
]
MEMORY_BOUND_REMEDIES = [
    "larger batches amortise each weight read over more tokens",
    "quantised weights (int8/fp8/int4)",
    "a smaller KV cache (GQA, fp8 KV) for long contexts",
]
COMPUTE_BOUND_REMEDIES = [
    "chunked prefill to interleave with decode",
    "fp8 matmuls",
    "FlashAttention kernels",
]


def _launch_bound(s: Signals) -> bool:
    """Far from the bandwidth roof with the GPU idle much of the time, or its kernels tiny."""
    if s.mbu is None or s.mbu >= 0.3:
        return False
    util, short = s.gpu_active_pct, s.short_kernel_share
    return util is None or util < 70 or (short is not None and short > 0.5)


def _evidence(s: Signals) -> list[str]:
    out = []
    if s.mbu is not None:
        out.append(
            f"decode at {100 * s.mbu:.1f}% of memory bandwidth (MBU), "
            + ("" if s.mfu is None else f"{100 * s.mfu:.2f}% of FLOP/s (MFU); ")
            + f"step {s.step_ms} ms vs floor {s.floor_ms} ms at batch {s.batch_mean}"
        )
    if s.prefill_mfu is not None:
        out.append(
            f"prefill at {100 * s.prefill_mfu:.1f}% of FLOP/s (MFU), {s.prefill_tokens_per_s:.0f} tokens/s"
        )
    if s.gpu_active_pct is not None:
        out.append(
            f"GPU kernel-active {s.gpu_active_pct:.0f}% of the time"
            + (f", SMs busy {s.sm_active_pct:.0f}%" if s.sm_active_pct is not None else "")
        )
    if s.short_kernel_share is not None:
        out.append(f"{100 * s.short_kernel_share:.0f}% of profiled CUDA kernels ran under 10 µs")
    return out


def _remedy(op: Operator) -> str:
    """The fix that fits a host-heavy operator, by what it is."""
    name = op.name.lower()
    if "cudnn_attention" in name:
        return (
            f"{op.name} plans every new shape on the CPU: leave cuDNN out of "
            "backend.sdpa_backends (the default), or keep shapes fixed (backend.prompt_bucket, compile)"
        )
    if "attention" in name or "sdpa" in name:
        return f"{op.name} is host-bound: try another backend.attn_implementation or sdpa_backends"
    if any(k in name for k in ("copy_", "item", "to_copy", "_local_scalar_dense", "nonzero")):
        return f"{op.name}: host-device copies or syncs in the step; keep tensors on the device"
    return (
        f"{op.name} costs the host {op.self_cpu_time_us / 1e3:.1f} ms: fewer, larger launches "
        "(compile, CUDA graphs) or fixed shapes"
    )
