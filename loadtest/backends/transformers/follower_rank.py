"""A follower rank's process (ranks 1..n-1 of a tensor-parallel group): load this rank's part of
the model, then run whatever generate() rank 0 announces (``parallel.Lockstep``) until it says
stop. Spawned by the harness (``followers``); its last words go back through a pipe."""

from __future__ import annotations

from typing import Any

from loadtest.backends.transformers.layout import Layout
from loadtest.backends.transformers.parallel import control_group


def follow(model, device, control) -> None:
    """A follower's loop: run whatever generate() rank 0 announces, until it says stop."""
    import torch
    import torch.distributed as dist

    while True:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=control)
        command = box[0]
        if command[0] == "stop":
            return
        _, ids, mask, kwargs = command
        with torch.inference_mode():
            model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)


def follower_main(spec: dict, base_dir: str, layout: Layout, says) -> None:
    """A follower rank's process (spawned beside rank 0 by the harness); ``says`` carries its
    last words to the harness if it fails."""
    import torch.distributed as dist

    from loadtest.backends.transformers.loading import load_model

    try:
        model, device, _ = load_model(spec, base_dir, layout)
        follow(model, device, control_group())
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
