"""Faults installed in the engine worker through its hook (``TransformersBackend.engine_hooks``):
each function runs in the worker with the loaded Engine and adds a ``before_batch`` callback."""

from __future__ import annotations

import os


def oom_in_batch_2(engine) -> None:
    def fault(engine, batch: int) -> None:
        if batch == 2:
            raise engine.torch.OutOfMemoryError("injected by tests.engine_faults")

    engine.before_batch.append(fault)


def exit_at_batch_4(engine) -> None:
    def fault(engine, batch: int) -> None:
        if batch == 4:
            engine.out.flush()  # the batches before it were reported
            os._exit(3)

    engine.before_batch.append(fault)


def batches_so_far(engine) -> int:
    """For ``call_in_engine``: the engine's own batch count."""
    return engine.batches


def freeze_at_batch_3(engine) -> None:
    """The worker stops itself (SIGSTOP, as ``kill -STOP`` would) as batch 3 starts: wedged, alive,
    silent. Only SIGKILL (or SIGCONT) ends that."""
    import signal

    def fault(engine, batch: int) -> None:
        if batch == 3:
            engine.out.flush()
            os.kill(os.getpid(), signal.SIGSTOP)

    engine.before_batch.append(fault)


def crash_in_warmup(engine) -> None:
    """Warm-up raises what a broken compile would: an error no batch catches."""

    def broken(shapes) -> None:
        raise TypeError("injected by tests.engine_faults: a warm-up that cannot run")

    engine.warmup.run = broken
