"""What ``compile: true`` builds: the batch sizes a static batch is padded to, the one compiled
graph that serves them all, and torch's counters of graphs and cache hits.

A graph takes tens of seconds to build from a cold cache (docs/benchmarks.md), so the warm-up
builds as few as it can. By default every decode step runs at max_batch_size rows,
one static graph (``pads_decode``, padded_decode.py). Otherwise, left alone, torch.compile would
build a static graph for the first batch size it sees and a graph with a dynamic batch
dimension at the second (automatic dynamic): two graphs where one serves.
``batch_dynamic_while_warming`` marks the batch dimension dynamic from the first compile, so
the warm-up builds one graph for every size from 2 (torch specializes size 1, so a batch of one
is padded to two: ``bucket_sizes``); with one batch size (``batch_buckets: [16]``) the graph is
static (``marks_batch_dynamic``). ``decode_compile_config`` skips inductor passes that lengthen the
compile and give the decode step nothing, and
``never_silently_eager`` keeps torch from running the step eagerly after too many graphs.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from loadtest.config.transformers_spec import TransformersSpec

if TYPE_CHECKING:
    from torch import Tensor
    from transformers import CompileConfig, PreTrainedModel
    from transformers.utils import ModelOutput

# Inductor passes skipped by default: without them the decode graph compiles faster, the step
# is no slower and the greedy tokens the same (bench/investigations/compile_warmup.py). The pattern matcher searches the graph for known subgraphs to rewrite
# (attention written out by hand, matmul and bias pairs); loop reordering tries fusions of
# differently ordered loops; pointwise autotuning benchmarks launch configs for each kernel.
FAST_COMPILE: dict[str, bool | int | float | str] = {
    "pattern_matcher": False,
    "loop_ordering_after_fusion": False,
    "triton.autotune_pointwise": False,
}


def decode_compile_config(options: dict | None) -> tuple[object, dict]:
    """transformers' ``CompileConfig`` for the decode step, and the inductor options it carries:
    ``options`` (default ``FAST_COMPILE``; ``{}``: torch's own) with CUDA graphs around the step,
    which is all transformers' default mode, reduce-overhead, sets (torch takes a mode or
    options, not both). An option this torch does not know is an error naming it."""
    import torch._inductor.config
    import transformers

    chosen = dict(FAST_COMPILE if options is None else options)
    chosen.setdefault("triton.cudagraphs", True)
    known = torch._inductor.config.get_config_copy()
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise ValueError(
            f"backend.compile_options: {', '.join(map(repr, unknown))} "
            f"{'is not an inductor option' if len(unknown) == 1 else 'are not inductor options'}"
            f" of torch {torch.__version__} (torch._inductor.config)"
        )
    # mode None: transformers types it str, but passes it on to torch.compile, which takes None
    config = transformers.CompileConfig(mode=None, options=chosen)  # type: ignore[arg-type]
    return config, chosen


def pads_decode(spec: TransformersSpec) -> bool:
    """Whether the scenario asks for every compiled decode step at max_batch_size rows
    (``pad_decode``, padded_decode.py): on by default in static mode with compile."""
    return spec.mode == "static" and bool(spec.compile) and spec.pad_decode is not False


def batching_details(spec: TransformersSpec, pad_decode: bool) -> dict:
    """The result's facts that follow from the fields a sweep changes live (max_batch_size),
    given whether the engine pads its decode steps (decided at load): computed at load and
    again at every such change, on both sides of the engine's pipe, so a point never batches,
    warms or reports by an earlier point's sizes."""
    return {
        "batch_buckets": batch_buckets_of(spec, pad_decode),
        "decode_batch_size": spec.max_batch_size if pad_decode else None,
    }


def batch_buckets_of(spec: TransformersSpec, pad_decode: bool = False) -> list[int] | None:
    """The batch sizes static batches are padded to, or None (no padding): on by default with
    compile. Unpadded decode steps build one graph for every size from 2 and one more for a
    size of 1, so their default sizes start at 2; padded ones run at max rows whatever the
    batch, so a batch of one prefills as one."""
    wanted = spec.batch_buckets
    if spec.mode != "static" or wanted is False or (wanted is None and not spec.compile):
        return None
    if wanted is True or wanted is None:
        smallest = 2 if spec.compile and not pad_decode else 1
        return bucket_sizes(spec.max_batch_size, smallest=smallest)
    return bucket_sizes(spec.max_batch_size, list(wanted))


def bucket_sizes(
    max_batch_size: int, sizes: list[int] | None = None, smallest: int = 1
) -> list[int]:
    """The batch sizes compiled and warmed: ``sizes`` (default: the powers of two from
    ``smallest``) below the cap, and the cap itself."""
    if sizes is None:
        sizes = [1 << k for k in range(max_batch_size.bit_length()) if 1 << k >= smallest]
    return sorted({s for s in sizes if s < max_batch_size} | {max_batch_size})


def batch_bucket(n: int, buckets: list[int]) -> int:
    """The warmed batch size a batch of ``n`` rows runs at: the smallest bucket that holds it
    (``bucket_sizes`` ends with max_batch_size, so one always does)."""
    return next(b for b in buckets if b >= n)


def marks_batch_dynamic(spec: TransformersSpec, buckets: list[int] | None) -> bool:
    """Whether a compiled warm-up of unpadded decode steps marks the batch dimension dynamic
    (padded ones run at one size, static): yes, so one graph serves
    every size from 2 (in a sweep, every point's), unless the sizes listed in ``batch_buckets``
    leave one such size (``buckets``, the sizes now): the choice of one static graph, which
    compiles faster than the dynamic one, every batch then running at that size."""
    listed = isinstance(spec.batch_buckets, list)
    return not (listed and buckets and len({b for b in buckets if b >= 2}) <= 1)


# Graphs one compiled decode step may build before torch gives up on it (its default is 8): a
# sweep of single-size points builds one a point.
RECOMPILE_LIMIT = 32


def never_silently_eager() -> None:
    """At its recompile limit torch.compile would run the step eagerly from then on, with only
    a log line: a compiled run measuring an eager model. Raise the limit, and make reaching it
    an error that fails the batch and says so."""
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(
        torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT
    )
    torch._dynamo.config.fail_on_recompile_limit_hit = True


@contextlib.contextmanager
def batch_dynamic_while_warming(model: PreTrainedModel) -> Iterator[None]:
    """Within it, every tensor the compiled decode step receives (the inputs and the static KV
    cache's layers) has its batch dimension marked dynamic before the call, so the first
    compile builds the graph every later batch size reuses. Weak marks: a size torch must
    specialize (1) gets a static graph, as it would unmarked. After warm-up nothing is marked:
    the graph's guards take any batch size from 2, and a step pays no marking."""
    import torch

    mark = torch._dynamo.maybe_mark_dynamic
    get_compiled_call = model.get_compiled_call  # transformers' auto-compile of decode steps

    def marked_call(compile_config: CompileConfig | None) -> Callable[..., ModelOutput]:
        compiled = get_compiled_call(compile_config)

        def call(*args: object, **kwargs: object) -> ModelOutput:
            first = kwargs.get("input_ids")
            first = kwargs.get("inputs_embeds") if first is None else first
            if torch.is_tensor(first):
                for t in _step_tensors(args, kwargs):
                    if t.dim() and t.shape[0] == first.shape[0]:
                        mark(t, 0)
            return compiled(*args, **kwargs)

        return call

    # an instance attribute over the method
    model.get_compiled_call = marked_call  # type: ignore[method-assign]
    try:
        yield
    finally:
        del model.get_compiled_call


def _step_tensors(args: tuple, kwargs: dict[str, object]) -> Iterator[Tensor]:
    """The tensors a decode step reads: its arguments, and the KV cache's per-layer tensors
    (transformers' ``Cache.layers``: keys and values, allocated for the batch)."""
    import torch

    for value in (*args, *kwargs.values()):
        if torch.is_tensor(value):
            yield value
        for layer in getattr(value, "layers", None) or ():
            yield from (t for t in vars(layer).values() if torch.is_tensor(t))


def compile_cache_counts() -> dict[str, int] | None:
    """Inductor's on-disk graph cache in this process so far (warm-up included): a warm cache
    (an earlier run on this machine) cuts a compiled warm-up to a fraction (docs/benchmarks.md)."""
    if "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.utils import counters

    c = counters["inductor"]
    if not (c["fxgraph_cache_hit"] or c["fxgraph_cache_miss"]):
        return None  # nothing went through inductor
    return {"hits": c["fxgraph_cache_hit"], "misses": c["fxgraph_cache_miss"]}


def cudagraph_skips() -> int | None:
    """Compiled graphs inductor ran without a CUDA graph around them in this process (None:
    nothing compiled): each such step pays its kernel launches again, which is most of what
    compile buys a decode step. Its log line says why (an input mutated, a CPU tensor, ...)."""
    if "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def compile_seconds() -> float:
    """Seconds torch.compile has spent building graphs in this process so far: dynamo's
    tracing, AOT autograd and inductor's code generation (0: it was never used)."""
    if "torch._dynamo" not in sys.modules:
        return 0.0
    from torch._dynamo.utils import compilation_time_metrics

    return float(sum(compilation_time_metrics.get("_compile.compile_inner", ())))


def compiled_graphs() -> int | None:
    """How many graphs torch.compile has built in this process (None: it was never used)."""
    if "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])
