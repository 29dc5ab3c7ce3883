"""Which CPUs an engine process runs on, and how many threads torch's CPU ops take there.

Each engine process would otherwise size torch's intra-op pool to every core of the machine, so
two GPU engines and the harness fight over the same cores: every CPU op of a decode step (the
stopping checks, the sampler's bookkeeping) wakes a pool as wide as the machine in each engine,
and a step is launch-bound on its Python thread. Serving engines pin their workers for the same
reason. So every engine process of a run on GPUs gets a block of CPUs of its own, in engine
order (GPU i's engine the i-th block: on a two-socket host GPUs and cores are numbered socket by
socket), the lowest CPU is left to the harness, and torch's pool is the block's size. On the
CPU (tests, demos) the engine's threads are the work itself: they share what the harness leaves
and are not pinned. The result lists each engine's CPUs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence


def cpu_block(index: int, processes: int, allowed: Sequence[int]) -> list[int]:
    """Engine process ``index`` of ``processes``: its own block of the ``allowed`` CPUs, the
    lowest left to the harness; with fewer CPUs than engines, one CPU each, shared in turn."""
    cpus = sorted(allowed)
    pool = cpus[1:] if len(cpus) > 1 else cpus
    size = len(pool) // processes
    if size == 0:
        return [pool[index % len(pool)]]
    return pool[index * size : (index + 1) * size]


def place(index: int, processes: int, device_type: str, affinity: str) -> dict:
    """Pin this process and size torch's pool (``affinity``: blocks or none); what was done."""
    import torch

    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if device_type == "cpu" or not allowed:
        # leave one core to the harness, and share the rest among engine processes
        torch.set_num_threads(max(1, ((os.cpu_count() or 2) - 1) // processes))
    elif affinity == "blocks":
        block = cpu_block(index, processes, allowed)
        os.sched_setaffinity(0, block)
        torch.set_num_threads(len(block))
    return {
        "cpus": _ranges(sorted(os.sched_getaffinity(0))) if allowed else None,
        "cpu_affinity": affinity if device_type != "cpu" and allowed else "none (CPU engine)",
        "torch_threads": torch.get_num_threads(),
    }


def _ranges(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``, as taskset and /proc write CPU lists."""
    out: list[str] = []
    start = prev = None
    for c in [*cpus, None]:
        if prev is not None and c == prev + 1:
            prev = c
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = c
    return ",".join(out)
