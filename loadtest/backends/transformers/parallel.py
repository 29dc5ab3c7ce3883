"""Tensor parallelism for the engine: a group of processes, one per device, stepping together.

Rank 0 is the engine the harness speaks to; ranks 1.. follow. Before each generate() rank 0
broadcasts the batch (token ids, mask, generation settings) on a gloo control group, and every
rank runs the same generate(), so the collectives inside the forward pass line up. Greedy
decoding on identical inputs gives identical tokens on every rank (the all-reduced activations
are the same everywhere), so every rank stops at the same step; only rank 0 streams and stamps.

The model is split the Megatron way, following its own plan (``config.base_model_tp_plan``):
``colwise`` layers keep 1/n of their output features (whole attention heads, whole MLP
columns), ``rowwise`` layers 1/n of their inputs, and each rowwise output is summed across the
ranks (an all-reduce). Each rank builds a model of the local shape (attention heads, KV heads and
the MLP width divided by n) straight on its device: random weights for ``dummy:`` models (no
checkpoint is ever written), the checkpoint's slices otherwise (safetensors, read a slice at a
time). Per-GPU compute, memory and bytes moved are then those of the split model, and the
roofline counts them per GPU.

The group rendezvous the way torchrun's does (``MASTER_ADDR``/``MASTER_PORT``, ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, on loopback). The host's NCCL environment is inherited as it is;
NVLink multicast is never turned on (``NCCL_NVLS_ENABLE`` and the torch/NVSHMEM equivalents
default to off here when unset, and are never overridden when set).
"""

from __future__ import annotations

import copy
import datetime as dt
import os
import re
from pathlib import Path
from typing import Any

from loadtest.backends.transformers.layout import Layout

# Multicast off unless the host says otherwise: one program using it can take a shared host's
# GPUs out of service (and a load tester has no use for it).
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
CONTROL_TIMEOUT = dt.timedelta(days=1)  # a follower idles in a broadcast between batches
SPLIT_FIELDS = ("num_attention_heads", "num_key_value_heads", "intermediate_size")


def environment(layout: Layout) -> dict[str, str]:
    """The variables a rank starts with: torchrun's rendezvous, multicast off unless set."""
    env = {k: v for k, v in MULTICAST_OFF.items() if k not in os.environ}
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(layout.port),
        RANK=str(layout.rank),
        LOCAL_RANK=str(layout.rank),
        WORLD_SIZE=str(layout.size),
    )
    return env


_control: Any = None  # this process's control group (a process is in one group at most)


def join_group(layout: Layout, device) -> None:
    """This process into its group (NCCL on CUDA, gloo on CPU), and the control group."""
    global _control
    import torch
    import torch.distributed as dist

    os.environ.update(environment(layout))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend="nccl" if device.type == "cuda" else "gloo",
        init_method="env://",
        rank=layout.rank,
        world_size=layout.size,
        timeout=dt.timedelta(minutes=10),
        **({"device_id": device} if device.type == "cuda" else {}),
    )
    _control = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)


def control_group() -> Any:
    """The group rank 0 announces each generate() on (``join_group`` made it)."""
    assert _control is not None, "not in a tensor-parallel group"
    return _control


def nccl_facts() -> dict[str, str]:
    """The NCCL and multicast variables in effect (for the result)."""
    keys = sorted(k for k in os.environ if k.startswith("NCCL_")) + [
        k for k in MULTICAST_OFF if not k.startswith("NCCL_")
    ]
    return {k: os.environ[k] for k in keys if k in os.environ}


# -- the split ------------------------------------------------------------------------------------


def plan_of(config) -> dict[str, str]:
    """The model's own tensor-parallel plan, if it is one this split follows."""
    plan = dict(getattr(config, "base_model_tp_plan", None) or {})
    if not plan:
        raise ValueError(f"{config.model_type}: the model declares no tensor-parallel plan")
    odd = {k: v for k, v in plan.items() if v not in ("colwise", "rowwise")}
    if odd:
        raise ValueError(
            f"{config.model_type}: tensor_parallel splits colwise/rowwise layers only; this "
            f"model's plan also has {odd}"
        )
    return plan


def local_config(config, size: int):
    """The config of one rank's part: heads, KV heads and MLP width divided by ``size``."""
    plan_of(config)
    local = copy.deepcopy(config)
    if getattr(local, "head_dim", None) is None:
        local.head_dim = config.hidden_size // config.num_attention_heads
    for name in SPLIT_FIELDS:
        value = getattr(config, name, None)
        if name == "num_key_value_heads" and value is None:
            value = config.num_attention_heads
        if value is None or value % size:
            raise ValueError(f"{name} = {value} does not split over {size} devices")
        setattr(local, name, value // size)
    return local


def _matcher(plan: dict[str, str], style: str) -> re.Pattern:
    keys = [re.escape(k).replace(r"\*", r"\d+") for k, v in plan.items() if v == style]
    return re.compile(rf"^(?:{'|'.join(keys)})$")


def sum_rowwise_outputs(model, plan: dict[str, str]) -> int:
    """An all-reduce after every rowwise layer (its partial sums over the ranks' inputs);
    returns how many layers got one."""
    import torch.distributed as dist

    rowwise = _matcher(plan, "rowwise")

    def all_reduce(_module, _inputs, output):
        dist.all_reduce(output)
        return output

    hooked = 0
    for name, module in model.base_model.named_modules():
        if rowwise.match(name):
            module.register_forward_hook(all_reduce)
            hooked += 1
    return hooked


def load_slices(model, directory: Path, rank: int, size: int, plan: dict[str, str]) -> None:
    """This rank's slices of a safetensors checkpoint into the local model, slice by slice."""
    from safetensors import safe_open

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{directory}: tensor_parallel loads safetensors checkpoints; none here")
    colwise, rowwise = _matcher(plan, "colwise"), _matcher(plan, "rowwise")
    prefix = model.base_model_prefix + "."
    params = dict(model.named_parameters())
    seen = set()
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                target = params.get(name)
                if target is None:
                    continue
                module, _, kind = name.removeprefix(prefix).rpartition(".")
                part = f.get_slice(name)
                rows = part.get_shape()[0]
                if colwise.match(module):
                    n = rows // size
                    tensor = part[rank * n : (rank + 1) * n]
                elif rowwise.match(module) and kind == "weight":
                    n = part.get_shape()[1] // size
                    tensor = part[:, rank * n : (rank + 1) * n]
                elif rowwise.match(module):  # a rowwise bias is added once, after the sum
                    tensor = part[:] if rank == 0 else part[:] * 0
                else:
                    tensor = part[:]
                target.data.copy_(tensor.to(target.dtype))
                seen.add(name)
    missing = set(params) - seen
    if model.config.tie_word_embeddings:
        model.tie_weights()
        missing.discard("lm_head.weight")
    if missing:
        raise ValueError(f"{directory}: the checkpoint lacks {sorted(missing)[:5]}")


def checkpoint_config(directory: Path):
    """A checkpoint's config, read from its folder."""
    import transformers

    return transformers.AutoConfig.from_pretrained(str(directory), local_files_only=True)


def describe(config, size: int, hooked: int) -> dict:
    """What the split is, for the result."""
    return {
        "size": size,
        "split": "Megatron: colwise/rowwise per the model's base_model_tp_plan, an all-reduce "
        f"after each rowwise layer ({hooked})",
        "per_rank": {name: getattr(config, name) for name in SPLIT_FIELDS},
        "note": "parameters, parameter_bytes and the roofline count one rank's part: per GPU",
        "nccl_env": nccl_facts(),
    }


# -- stepping together ----------------------------------------------------------------------------


class Lockstep:
    """Rank 0's side: every generate() is announced to the followers before it runs."""

    def __init__(self, control) -> None:
        self.control = control

    def announce(self, ids, mask, kwargs: dict) -> None:
        import torch.distributed as dist

        dist.broadcast_object_list([("generate", ids, mask, kwargs)], src=0, group=self.control)

    def finish(self) -> None:
        import torch.distributed as dist

        try:
            dist.broadcast_object_list([("stop",)], src=0, group=self.control)
        except Exception:  # a follower already gone: the harness ends it anyway
            pass
