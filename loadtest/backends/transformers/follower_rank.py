"""A follower rank's process (ranks 1..n-1 of a tensor-parallel group): load this rank's part of
the model, then run whatever generate() rank 0 announces (``parallel.Lockstep``) until it says
stop. Spawned by the harness (``followers``); its last words go back through a pipe."""

from __future__ import annotations

import contextlib
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from loadtest.backends.transformers.decode_loop import PipelinedDecode
from loadtest.backends.transformers.layout import Layout
from loadtest.backends.transformers.padded_decode import PaddedDecode
from loadtest.backends.transformers.parallel import control_group
from loadtest.config.transformers_spec import TransformersSpec

if TYPE_CHECKING:
    from torch import device as TorchDevice
    from torch.distributed import ProcessGroup
    from transformers import PreTrainedModel


def follow(
    model: PreTrainedModel,
    device: TorchDevice,
    control: ProcessGroup,
    padded: PaddedDecode | None = None,
    loop: PipelinedDecode | None = None,
) -> None:
    """A follower's loop: run whatever generate() or pipelined decode rank 0 announces, until
    it says stop. ``padded``: this rank's ``PaddedDecode`` (its own static cache) when decode
    steps are padded, and ``loop`` its ``PipelinedDecode`` when they are pipelined; a warm-up
    that marks the batch dynamic is marked here alike, so every rank builds the same graphs."""
    import torch
    import torch.distributed as dist

    from loadtest.backends.transformers.compiling import batch_dynamic_while_warming

    while True:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=control)
        command = box[0]
        if command[0] == "stop":
            return
        if command[0] == "decode":
            _, ids, mask, (caps, eos, steps), shape = command
            assert padded is not None and loop is not None  # rank 0 pipelines: so does this one
            padded.generate_kwargs(*shape)
            loop.run(ids.to(device), mask.to(device), caps, eos, steps)
            continue
        _, ids, mask, kwargs, padded_shape, dynamic = command
        if padded_shape is not None:
            assert padded is not None  # rank 0 pads its decode steps: so does this one
            kwargs.update(padded.generate_kwargs(*padded_shape))
        marked = batch_dynamic_while_warming(model) if dynamic else contextlib.nullcontext()
        with torch.inference_mode(), marked:
            # a causal LM: its class mixes in generate(), which PreTrainedModel does not declare
            model.generate(  # type: ignore[operator]
                input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs
            )


def follower_main(spec: TransformersSpec, base_dir: str, layout: Layout, says: Connection) -> None:
    """A follower rank's process (spawned beside rank 0 by the harness); ``says`` carries its
    last words to the harness if it fails."""
    import signal

    import torch.distributed as dist

    from loadtest.backends.transformers.loading import load_model

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the harness's: it stops the ranks

    try:
        model, device, info = load_model(spec, base_dir, layout)
        padded = PaddedDecode(model) if info.get("pad_decode") else None
        loop = None
        if padded is not None and info.get("decode_loop") == "pipelined":
            loop = PipelinedDecode(model, padded)
        follow(model, device, control_group(), padded, loop)
    except BaseException as exc:
        try:
            says.send(f"{type(exc).__name__}: {exc}"[:500])
        except OSError:
            pass
        raise SystemExit(1) from None
    finally:
        says.close()
        if dist.is_initialized():
            dist.destroy_process_group()
