"""The engine's facts of a point, sent to the harness between points and at the end."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Protocol

from loadtest.backends.base import Facts
from loadtest.backends.transformers.compiling import (
    compile_cache_counts,
    compiled_graphs,
    cudagraph_skips,
)
from loadtest.core.heap import GcPauses
from loadtest.core.step_accounting import StepAccounting

if TYPE_CHECKING:
    from types import ModuleType

    from torch import device as TorchDevice

    from loadtest.backends.transformers.profiling import WorkerProfiler


class _Flushes(Protocol):
    def flush(self) -> None: ...


class Counted(Protocol):
    """What an engine counts between facts (``engine.Engine``)."""

    @property
    def torch(self) -> ModuleType: ...
    @property
    def device(self) -> TorchDevice: ...
    @property
    def out(self) -> _Flushes: ...  # flushed first: its thread updates the accounting
    @property
    def gc(self) -> GcPauses: ...

    batches: int
    _batches_reported: int
    acct: StepAccounting
    stamp_mismatches: int
    graphs_at_window: int | None
    pending_export: tuple[WorkerProfiler, str] | None  # a closed window, exported at the end


def engine_facts(engine: Counted, reset: bool = False) -> Facts:
    """What the engine did since the last reset: batches, step accounting for the roofline,
    stamp mismatches, collector pauses, graphs compiled in the window, peak memory; with
    ``reset``, a closed profiler window's export too, and the counts start again."""
    torch = engine.torch
    engine.out.flush()  # the accounting is updated on the outbox's thread
    facts: Facts = {
        "batches": engine.batches - engine._batches_reported,
        "roofline_acct": asdict(engine.acct),
        "stamp_mismatches": engine.stamp_mismatches,
        "gc_pauses": engine.gc.summary(reset),
    }
    graphs = compiled_graphs()
    if graphs is not None and engine.graphs_at_window is not None:
        # torch.compile building graphs inside the window: seconds charged to requests
        facts["recompiles_in_window"] = graphs - engine.graphs_at_window
    cache = compile_cache_counts()
    if cache is not None:
        facts["compile_cache"] = {k: v for k, v in cache.items()}  # as JSON
    skips = cudagraph_skips()
    if skips and engine.device.type == "cuda":
        facts["cudagraph_skips"] = skips
    if reset:
        engine.graphs_at_window = None
    if reset and engine.pending_export is not None:
        profiler, out_dir = engine.pending_export
        engine.pending_export = None
        facts["profile_export"] = profiler.export(out_dir)
    if reset:
        engine._batches_reported = engine.batches
        engine.acct = StepAccounting()
        engine.stamp_mismatches = 0
    if engine.device.type == "cuda":
        facts["peak_mem_mb"] = round(torch.cuda.max_memory_allocated(engine.device) / 2**20, 1)
        if reset:
            torch.cuda.reset_peak_memory_stats(engine.device)
    else:
        import resource

        facts["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return facts
