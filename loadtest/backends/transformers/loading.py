"""Loading a transformers model (in the engine worker): local folder, cached hub id, or dummy.

No network, ever: hub ids load with ``local_files_only``. ``dummy:<arch>`` builds the real
architecture from its config with random weights, directly on the target device and dtype.
"""

from __future__ import annotations

import os
from pathlib import Path

from loadtest.config.model_shapes import DUMMY_ARCHITECTURES


def resolve_device(name: str):
    """``auto`` -> cuda when there is one, else cpu; a named device as torch has it."""
    import torch

    if name == "auto":
        name = "cuda:0" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def resolve_dtype(name: str, device):
    """``auto`` -> bfloat16 on CUDA, float32 elsewhere; a named dtype as torch has it."""
    import torch

    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


DEFAULT_SDPA = ("flash", "efficient", "math")


def choose_sdpa_backends(torch, device, wanted) -> list[str] | None:
    """Enable exactly these SDPA kernels in this (worker) process on CUDA; returns them."""
    if device.type != "cuda":
        return None
    chosen = tuple(wanted) if wanted else DEFAULT_SDPA
    torch.backends.cuda.enable_flash_sdp("flash" in chosen)
    torch.backends.cuda.enable_mem_efficient_sdp("efficient" in chosen)
    torch.backends.cuda.enable_cudnn_sdp("cudnn" in chosen)
    torch.backends.cuda.enable_math_sdp("math" in chosen)
    return list(chosen)


def load_model(spec: dict, base_dir: str):
    """The model on its device (or a ``dummy:<arch>`` with random weights), and facts about it."""
    import torch
    import transformers

    device = resolve_device(spec["device"])
    dtype = resolve_dtype(spec["dtype"], device)
    if device.type == "cpu":
        # A CPU model would otherwise take every core, and the harness's dispatch would queue
        # behind it: leave one core to the harness.
        torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    torch.manual_seed(spec["seed"])
    sdpa = choose_sdpa_backends(torch, device, spec.get("sdpa_backends"))
    attn = (
        {"attn_implementation": spec["attn_implementation"]}
        if spec.get("attn_implementation")
        else {}
    )
    name = spec["model"]
    if name.startswith("dummy:"):
        arch = name.split(":", 1)[1]
        cfg = dict(DUMMY_ARCHITECTURES[arch])
        config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype, **attn)
        source = f"dummy weights, {arch} shapes"
    else:
        path = Path(os.path.expanduser(name))
        if not path.is_absolute() and (Path(base_dir) / path).is_dir():
            path = Path(base_dir) / path
        target = str(path) if path.is_dir() else name
        model = transformers.AutoModelForCausalLM.from_pretrained(
            target,
            dtype=dtype,
            local_files_only=True,
            trust_remote_code=spec["trust_remote_code"],
            **attn,
        ).to(device)
        source = str(target)
    model.eval()
    config = model.config
    pad = getattr(model.generation_config, "pad_token_id", None)
    eos = getattr(model.generation_config, "eos_token_id", None)
    if pad is None:
        pad = eos if isinstance(eos, int) else (eos[0] if eos else 0)
    n_params = sum(p.numel() for p in model.parameters())
    info = {
        "model": name,
        "source": source,
        "architecture": type(model).__name__,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": str(dtype).removeprefix("torch."),
        "parameters": n_params,
        "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "attn_implementation": getattr(config, "_attn_implementation", None),
        "sdpa_backends": sdpa,
        "prompt_bucket": spec.get("prompt_bucket") or 1,
        "batch_buckets": _batch_buckets(spec),
        "mode": spec["mode"],
        "compile": spec["compile"],
        "trust_remote_code": spec["trust_remote_code"],
        "pad_token_id": pad,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda if device.type == "cuda" else None,
        "dtype_bytes": torch.tensor([], dtype=dtype).element_size(),
        "shape_config": {
            k: getattr(config, k, None)
            for k in (
                "model_type",
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "intermediate_size",
                "vocab_size",
                "hidden_act",
            )
        },
    }
    return model, device, info


def _batch_buckets(spec: dict) -> list[int] | None:
    """The batch sizes static fixed-output batches are padded to, or None (no padding): on by
    default with compile, where each size is a compiled graph."""
    from loadtest.backends.transformers.worker import bucket_sizes

    wanted = spec.get("batch_buckets")
    if spec["mode"] != "static" or wanted is False or (wanted is None and not spec["compile"]):
        return None
    return bucket_sizes(spec["max_batch_size"], None if wanted in (True, None) else list(wanted))
