"""Tensor parallelism for the engine: a group of processes, one per device, stepping together.

Rank 0 is the engine the harness speaks to; ranks 1.. follow. Before each generate() rank 0
broadcasts the batch (token ids, mask, generation settings) on a gloo control group, and every
rank runs the same generate(), so the collectives inside the forward pass line up. Greedy
decoding on identical inputs gives identical tokens on every rank (the all-reduced activations
are the same everywhere), so every rank stops at the same step; only rank 0 streams and stamps.

The model is split the Megatron way, following its own plan (``split``). Each rank builds a
model of the local shape straight on its device: random weights for ``dummy:`` models (no
checkpoint is ever written), the checkpoint's slices otherwise (safetensors, read a slice at a
time). Per-GPU compute, memory and bytes moved are then those of the split model, and the
roofline counts them per GPU.

The group rendezvous the way torchrun's does (``MASTER_ADDR``/``MASTER_PORT``, ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, on loopback). The host's NCCL environment is inherited as it is;
NVLink multicast is never turned on (``NCCL_NVLS_ENABLE`` and the torch/NVSHMEM equivalents
default to off here when unset, and are never overridden when set).
"""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING

from loadtest.backends.transformers.layout import Layout

if TYPE_CHECKING:
    from torch import Tensor
    from torch import device as TorchDevice
    from torch.distributed import ProcessGroup

# Multicast off unless the host says otherwise: one program using it can take a shared host's
# GPUs out of service (and a load tester has no use for it).
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
CONTROL_TIMEOUT = dt.timedelta(days=1)  # a follower idles in a broadcast between batches


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


_control: ProcessGroup | None = (
    None  # this process's control group (a process is in one group at most)
)


def join_group(layout: Layout, device: TorchDevice) -> None:
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
        device_id=device if device.type == "cuda" else None,
    )
    _control = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)


def control_group() -> ProcessGroup:
    """The group rank 0 announces each generate() on (``join_group`` made it)."""
    assert _control is not None, "not in a tensor-parallel group"
    return _control


def nccl_facts() -> dict[str, str]:
    """The NCCL and multicast variables in effect (for the result)."""
    keys = sorted(k for k in os.environ if k.startswith("NCCL_")) + [
        k for k in MULTICAST_OFF if not k.startswith("NCCL_")
    ]
    return {k: os.environ[k] for k in keys if k in os.environ}


# -- stepping together ----------------------------------------------------------------------------


class Lockstep:
    """Rank 0's side: every generate() is announced to the followers before it runs."""

    def __init__(self, control: ProcessGroup) -> None:
        self.control = control

    def announce(
        self,
        ids: Tensor,
        mask: Tensor,
        kwargs: dict,
        padded: tuple[int, int] | None,
        dynamic: bool,
    ) -> None:
        """Every rank runs this generate(): the inputs and settings, less what each rank holds
        its own of (the streamer; a padded decode's static cache, named by its ``padded``
        rows and length); ``dynamic``: a warm-up marking the batch dimension dynamic."""
        import torch.distributed as dist

        own = {"streamer"} | (
            {"cache", "past_key_values", "cache_implementation"} if padded else set()
        )
        settings = {k: v for k, v in kwargs.items() if k not in own}
        command = ("generate", ids, mask, settings, padded, dynamic)
        dist.broadcast_object_list([command], src=0, group=self.control)

    def announce_decode(
        self, ids: Tensor, mask: Tensor, plan: tuple, padded: tuple[int, int]
    ) -> None:
        """Every rank runs this pipelined decode (``decode_loop``): the inputs, ``plan`` (caps,
        end-of-sequence ids, steps: what every rank's stop decisions follow) and the rows and
        length of the padded cache each rank holds its own of."""
        import torch.distributed as dist

        dist.broadcast_object_list([("decode", ids, mask, plan, padded)], src=0, group=self.control)

    def finish(self) -> None:
        import torch.distributed as dist

        try:
            dist.broadcast_object_list([("stop",)], src=0, group=self.control)
        except Exception:  # a follower already gone: the harness ends it anyway
            pass
