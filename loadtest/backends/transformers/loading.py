"""Loading a transformers model (in the engine worker): local folder, cached hub id, or dummy.

No network, ever: hub ids load with ``local_files_only``. ``dummy:<arch>`` builds the real
architecture from its config with random weights, directly on the target device and dtype.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from loadtest.backends.base import Facts
from loadtest.backends.transformers import (
    attention,
    decode_loop,
    padded_decode,
    parallel,
    placement,
    split,
)
from loadtest.backends.transformers.compiling import (
    batching_details,
    decode_compile_config,
    never_silently_eager,
    pads_decode,
)
from loadtest.backends.transformers.layout import Layout
from loadtest.config.model_shapes import DUMMY_ARCHITECTURES
from loadtest.config.transformers_spec import TransformersSpec

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig, PreTrainedModel


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when there is one, else cpu; a named device as torch has it. A CUDA
    device is always indexed (``cuda`` -> ``cuda:N``, N this process's current device):
    ``torch.cuda.set_device`` refuses one without, and the result names the GPU it ran on."""
    import torch

    if name == "auto":
        name = "cuda:0" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise ValueError(
                f"{name}: this machine has {count} CUDA device(s) (several devices, replicas "
                "and tensor_parallel mean GPUs unless device: cpu)"
            )
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """``auto`` -> bfloat16 on CUDA, float32 elsewhere; a named dtype as torch has it."""
    import torch

    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


DEFAULT_SDPA = ("flash", "efficient", "math")


def choose_sdpa_backends(
    torch: ModuleType, device: torch.device, wanted: Sequence[str] | None
) -> list[str] | None:
    """Enable exactly these SDPA kernels in this (worker) process on CUDA; returns them."""
    if device.type != "cuda":
        return None
    chosen = tuple(wanted) if wanted else DEFAULT_SDPA
    torch.backends.cuda.enable_flash_sdp("flash" in chosen)
    torch.backends.cuda.enable_mem_efficient_sdp("efficient" in chosen)
    torch.backends.cuda.enable_cudnn_sdp("cudnn" in chosen)
    torch.backends.cuda.enable_math_sdp("math" in chosen)
    return list(chosen)


def load_model(
    spec: TransformersSpec, base_dir: str, layout: Layout | None = None
) -> tuple[PreTrainedModel, torch.device, Facts]:
    """The model on its device (or a ``dummy:<arch>`` with random weights), and facts about it.
    With a tensor-parallel ``layout``, this rank's part of it, in its group."""
    import torch

    layout = layout or Layout(devices=(spec.device,))
    # Every rank checks the whole group, in the same order, so whichever rank's failure reaches
    # the harness first, it names the same device: the first one the machine lacks.
    device = [resolve_device(name) for name in layout.devices][layout.rank]
    if device.type == "cuda":
        # This process's GPU is its current device, so that whatever names none (CUDA events,
        # synchronize(), the graphs' memory pool and stream) means this one, not cuda:0: a
        # replica on cuda:1 recorded its decode events on cuda:0's idle stream.
        torch.cuda.set_device(device)
    dtype = resolve_dtype(spec.dtype, device)
    cpus = placement.place(layout.index, layout.processes, device.type, spec.cpu_affinity)
    plan = None
    if layout.size > 1:
        # the plan is read and judged before any collective or GPU work: a model the split
        # cannot apply is refused at once, on every rank alike
        config, folder, source = _whole_config(spec, base_dir, layout)
        plan = split.plan_of(config)
        parallel.join_group(layout, device)
    torch.manual_seed(spec.seed)  # every rank alike: their replicated weights agree
    sdpa = choose_sdpa_backends(torch, device, spec.sdpa_backends)
    attention.register()  # a scenario may name it
    attn: dict[str, Any] = (
        {"attn_implementation": spec.attn_implementation} if spec.attn_implementation else {}
    )
    split_facts: dict | None  # what the split is: none without one
    if plan is not None:
        model, split_facts = _load_split(
            config, folder, plan, device, dtype, attn, layout, spec.all_reduce
        )
    else:
        model, source, split_facts = _built(spec, base_dir, device, dtype, attn)
    model.eval()
    attention.pack_decode_attention(model, spec)
    pad_decode, unpadded_why = _padding(model, spec)
    loop, unpipelined_why = decode_loop.decode_loop_of(model, spec, pad_decode)
    compile_options = None
    if spec.compile:
        compile_config, compile_options = decode_compile_config(spec.compile_options)
        model.generation_config.compile_config = compile_config
        never_silently_eager()
    info = {
        **_model_facts(model, spec, source, device, dtype),
        "sdpa_backends": sdpa,
        "prompt_bucket": spec.prompt_bucket or 1,
        "pad_decode": pad_decode,
        **({"pad_decode_off": unpadded_why} if unpadded_why else {}),
        "decode_loop": loop,
        **({"decode_loop_off": unpipelined_why} if unpipelined_why else {}),
        **batching_details(spec, pad_decode),
        "mode": spec.mode,
        "api": spec.api,
        "compile": spec.compile,
        "compile_options": compile_options,
        "trust_remote_code": spec.trust_remote_code,
        "tensor_parallel": split_facts,
        **cpus,
        **_versions_and_shape(model, device, dtype),
    }
    return model, device, info


def _built(
    spec: TransformersSpec,
    base_dir: str,
    device: torch.device,
    dtype: torch.dtype,
    attn: dict[str, Any],  # Any: from_pretrained types each keyword its own way
) -> tuple[PreTrainedModel, str, None]:
    """(model, where its weights came from, None: no tensor-parallel split)."""
    import torch
    import transformers

    name = spec.model
    # an encoder (api: embeddings) is its base model: its hidden states are what is pooled
    auto = transformers.AutoModel if spec.api == "embeddings" else transformers.AutoModelForCausalLM
    if name.startswith("dummy:"):
        arch = name.split(":", 1)[1]
        with torch.device(device):
            model = auto.from_config(dummy_config(arch), dtype=dtype, **attn)
        return model, f"dummy weights, {arch} shapes", None
    target = _checkpoint(name, base_dir)
    model = auto.from_pretrained(
        target,
        dtype=dtype,
        local_files_only=True,
        trust_remote_code=spec.trust_remote_code,
        **attn,
    )
    # in place, as a module moves; transformers wraps .to in a decorator mypy misreads
    model.to(device)  # type: ignore[arg-type]
    return model, str(target), None


def _padding(model: PreTrainedModel, spec: TransformersSpec) -> tuple[bool, str | None]:
    """Whether decode steps run padded to max_batch_size, and why not where the model's cache
    cannot be (an error when the scenario asked for it)."""
    pad_decode, unpadded_why = pads_decode(spec), None
    if pad_decode and (unpadded_why := padded_decode.layer_problem(model)):
        if spec.pad_decode:
            raise ValueError(
                f"backend.pad_decode: {spec.model} cannot pad its decode steps: {unpadded_why}"
            )
        pad_decode = False  # by default, the graph with a dynamic batch dimension instead
    return pad_decode, unpadded_why


def _model_facts(
    model: PreTrainedModel,
    spec: TransformersSpec,
    source: str,
    device: torch.device,
    dtype: torch.dtype,
) -> Facts:
    import torch

    config = model.config
    return {
        "model": spec.model,
        "source": source,
        "architecture": type(model).__name__,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": str(dtype).removeprefix("torch."),
        "parameters": sum(p.numel() for p in model.parameters()),
        "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "attn_implementation": getattr(config, "_attn_implementation", None),
    }


SHAPE_FIELDS = (
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


def _versions_and_shape(model: PreTrainedModel, device: torch.device, dtype: torch.dtype) -> Facts:
    """The pad token, the libraries' versions, and the shape the roofline counts from."""
    import torch
    import transformers

    generation = getattr(model, "generation_config", None) or model.config  # an encoder's: none
    pad = getattr(generation, "pad_token_id", None)
    eos = getattr(generation, "eos_token_id", None)
    if pad is None:
        pad = eos if isinstance(eos, int) else (eos[0] if eos else 0)
    return {
        "pad_token_id": pad,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda if device.type == "cuda" else None,
        "dtype_bytes": torch.tensor([], dtype=dtype).element_size(),
        "shape_config": {k: getattr(model.config, k, None) for k in SHAPE_FIELDS},
    }


def dummy_config(arch: str) -> PretrainedConfig:
    """The transformers config of ``dummy:<arch>`` (``config.model_shapes``)."""
    import transformers

    cfg = dict(DUMMY_ARCHITECTURES[arch])
    return transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)


def _checkpoint(name: str, base_dir: str) -> str:
    """A model folder (relative to the scenario's) or a hub id, as from_pretrained takes it."""
    path = Path(os.path.expanduser(name))
    if not path.is_absolute() and (Path(base_dir) / path).is_dir():
        path = Path(base_dir) / path
    return str(path) if path.is_dir() else name


def _whole_config(
    spec: TransformersSpec, base_dir: str, layout: Layout
) -> tuple[PretrainedConfig, Path | None, str]:
    """The whole model's config, the checkpoint folder (None for a dummy), and the source line
    of a tensor-parallel rank."""
    name = spec.model
    if name.startswith("dummy:"):
        arch = name.split(":", 1)[1]
        return (
            dummy_config(arch),
            None,
            f"dummy weights, {arch} shapes, rank {layout.rank} of {layout.size}",
        )
    folder = Path(_checkpoint(name, base_dir))
    if not folder.is_dir():
        raise ValueError(f"tensor_parallel needs a local model folder, not {name!r}")
    return split.checkpoint_config(folder), folder, f"{folder}, rank {layout.rank} of {layout.size}"


def _load_split(
    config: PretrainedConfig,
    folder: Path | None,
    plan: dict[str, str],
    device: torch.device,
    dtype: torch.dtype,
    attn: dict[str, Any],
    layout: Layout,
    all_reduce: str | None = None,
) -> tuple[PreTrainedModel, dict]:
    """This rank's part of the model, built at its local shape on its device: random weights
    for a dummy, the checkpoint's slices otherwise (``split``); its small all-reduces one-shot
    where ``all_reduce`` (default: where the device can) says so."""
    import torch
    import transformers

    local = split.local_config(config, layout.size, plan)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(local, dtype=dtype, **attn)
    if folder is not None:
        split.load_slices(model, folder, layout.rank, layout.size, plan)
    applied = split.apply(model, config, plan, layout.rank, layout.size)
    one_shot_off: str | None = "the scenario's all_reduce: nccl"
    if all_reduce != "nccl":
        one_shot_off = split.use_one_shot(dtype, device)
        if one_shot_off and all_reduce == "one_shot":
            raise ValueError(f"backend.all_reduce: one_shot: {one_shot_off}")
    return model, {
        **split.describe(local, plan, layout.size, applied, one_shot_off),
        "nccl_env": parallel.nccl_facts(),
    }
