"""Cold compiled warm-up, by compile setting: how long the compiled batch sizes take to build
from an empty compile cache, where that time goes, and the decode speed they give. GPU machine;
each variant in a fresh process with empty inductor and Triton caches.

    PYTHONPATH=. python bench/investigations/compile_warmup.py [--model llama-3.2-1b] [--only 1,2]

Each variant runs generate (static cache, 256-token prompts, 32 new tokens) at each of its batch
sizes in its order (seconds per size: which one built a graph, and its cost), as the engine's
warm-up does, then times 64 tokens at batch 2 and 16 (best of 3), and runs
one batch size it never warmed (3) to see whether that builds a new graph. Columns: warm-up s,
graphs built by dynamo, the time torch's own compile phases report, ms per token, and whether
the greedy tokens for fixed prompts at batch 2 are the first variant's.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_cache import dummy_model, run_variants, timed_generate

from loadtest.backends.transformers.compiling import FAST_COMPILE

DOWN, UP = (16, 8, 4, 2, 1), (1, 2, 4, 8, 16)


class Variant(NamedTuple):
    dynamic: bool | None  # given to transformers' CompileConfig
    sizes: tuple[int, ...]  # batch sizes warmed, in this order
    layers_once: bool = False  # the decoder layers marked as one shared nested compile region
    marked: bool = False  # warmed inside loadtest's batch_dynamic_while_warming
    inductor: tuple[tuple[str, object], ...] = ()  # torch._inductor.config settings patched


VARIANTS = {
    "automatic dynamic (transformers' default), sizes 16..1": Variant(None, DOWN),
    "dynamic batch from the first compile, sizes 16..2": Variant(True, DOWN[:-1]),
    "dynamic batch from the first compile, sizes 16..1": Variant(True, DOWN),
    "automatic dynamic, layers compiled once, sizes 16..1": Variant(None, DOWN, layers_once=True),
    "automatic dynamic, sizes 1..16 (the engine's order before)": Variant(None, UP),
    "static graphs (dynamic=False), sizes 1..16": Variant(False, UP),
    "batch marked dynamic at the first compile, sizes 2..16 (the engine's now)": Variant(
        None, UP[1:], marked=True
    ),
    # what inductor spends its compile on, by the passes it can skip (decode speed beside)
    "marked, sizes 2..16, no pattern matcher": Variant(
        None, UP[1:], marked=True, inductor=(("pattern_matcher", False),)
    ),
    "marked, sizes 2..16, no loop reordering after fusion": Variant(
        None, UP[1:], marked=True, inductor=(("loop_ordering_after_fusion", False),)
    ),
    "marked, sizes 2..16, no pointwise autotuning": Variant(
        None, UP[1:], marked=True, inductor=(("triton.autotune_pointwise", False),)
    ),
    "marked, sizes 2..16, all three skipped (the engine's default set)": Variant(
        None, UP[1:], marked=True, inductor=tuple(FAST_COMPILE.items())
    ),
}
PROMPT, NEW, TIMED = 256, 32, 64


def share_layer_region(model) -> None:
    """Mark every decoder layer's forward as one nested compile region (torch >= 2.8): dynamo
    traces one layer and stamps it out for the others, where inductor reuses its code."""
    import types

    import torch

    layers = model.model.layers
    region = torch.compiler.nested_compile_region(type(layers[0]).forward)
    for layer in layers:  # the same wrapped function on every layer: one region
        layer.forward = types.MethodType(region, layer)


def child(name: str, arch: str) -> dict:
    import torch
    import transformers
    from torch._dynamo.utils import counters

    from loadtest.backends.transformers.compiling import batch_dynamic_while_warming

    variant = VARIANTS[name]
    dynamic = variant.dynamic
    for key, value in variant.inductor:  # this process only: each variant runs in its own
        *path, last = key.split(".")
        section = torch._inductor.config
        for part in path:
            section = getattr(section, part)
        setattr(section, last, value)
    torch.manual_seed(0)  # the same random weights in every variant's process
    model = dummy_model(arch)
    if variant.layers_once:
        share_layer_region(model)
    torch.backends.cuda.enable_cudnn_sdp(False)  # the engine's default SDPA choice

    def gen(bs: int, new: int) -> float:
        return timed_generate(
            model,
            bs,
            PROMPT,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
            cache_implementation="static",
            compile_config=transformers.CompileConfig(dynamic=dynamic),
        )

    per_size = {}
    with batch_dynamic_while_warming(model) if variant.marked else contextlib.nullcontext():
        for bs in variant.sizes:
            per_size[bs] = round(gen(bs, NEW), 1)  # the first includes the one-time set-up
    warm = sum(per_size.values())
    graphs = int(counters["stats"]["unique_graphs"])
    step = {bs: min(gen(bs, TIMED) for _ in range(3)) / TIMED * 1e3 for bs in (2, 16)}
    t = time.perf_counter()
    gen(3, NEW)
    unseen = time.perf_counter() - t
    # what it computes: greedy tokens for fixed prompts, to compare between variants
    ids = torch.arange(2 * PROMPT, device="cuda").reshape(2, PROMPT) % 1000
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW,
            do_sample=False,
            pad_token_id=0,
            cache_implementation="static",
            compile_config=transformers.CompileConfig(dynamic=dynamic),
        )
    tokens = out[:, PROMPT:].flatten().tolist()
    # torch's own compile phases (dynamo tracing, AOT, inductor codegen, ...), summed
    from torch._dynamo.utils import compilation_time_metrics

    phases = {k: round(sum(v), 1) for k, v in compilation_time_metrics.items() if sum(v) >= 0.5}
    return {
        "warmup_s": round(warm, 1),
        "per_size_s": per_size,
        "graphs": graphs,
        "graphs_after_unseen": int(counters["stats"]["unique_graphs"]),
        "unseen_s": round(unseen, 2),
        "ms_b2": step[2],
        "ms_b16": step[16],
        "phases": phases,
        "tokens": tokens,
    }


def main() -> None:
    rows = run_variants(child, VARIANTS, __file__)
    if rows is None:  # this was the child
        return
    first = next((d["tokens"] for _, d in rows if d is not None), None)
    print(
        "\n| variant | warm-up s | s per size | graphs | unseen size 3: s, graphs | ms/token b2 "
        "| b16 | greedy tokens as the first variant's |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, d in rows:
        if d is None:
            print(f"| {name} | failed | | | | | | |")
            continue
        same = sum(a == b for a, b in zip(d["tokens"], first, strict=True))
        sizes = ", ".join(f"{bs}: {s}" for bs, s in d["per_size_s"].items())
        print(
            f"| {name} | {d['warmup_s']} | {sizes} | {d['graphs']} | {d['unseen_s']}, "
            f"{d['graphs_after_unseen']} | {d['ms_b2']:.2f} | {d['ms_b16']:.2f} "
            f"| {same}/{len(first)} |"
        )


if __name__ == "__main__":
    main()
