"""A compiled warm-up's generate() calls run to the whole output, or stopped after the engine's
``WARM_STEPS`` tokens with the heap settled first (what the engine does): what each costs, and
whether the shorter one leaves anything to build in the window. GPU machine; each variant in a
fresh process with empty inductor and Triton caches.

    PYTHONPATH=. python bench/investigations/warmup_steps.py [--model llama-3.2-1b] [--only 1,2,1,2]

Each variant warms batch sizes 2, 4, 8 and 16 as the engine does (static cache for 512-token
prompts and 96 new tokens, the batch dimension marked dynamic, loadtest's compile options),
then runs two full 96-token generate() calls at each size: if the first is no slower than the
second, nothing was left to compile or record. Columns: warm-up s; its compile and gc shares;
seconds per size (the first includes the compile); graphs built; the two full calls at 2 and 16.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_cache import dummy_model, run_variants

VARIANTS = {
    "whole output (96 tokens) per size": False,
    "WARM_STEPS tokens per size, heap settled first (the engine's)": True,
}
PROMPT, NEW, SIZES = 512, 96, (2, 4, 8, 16)


def child(name: str, arch: str) -> dict:
    import torch
    import transformers
    from torch._dynamo.utils import counters

    from loadtest.backends.transformers.compiling import (
        batch_dynamic_while_warming,
        compile_seconds,
        decode_compile_config,
    )
    from loadtest.backends.transformers.engine import StopAfterSteps
    from loadtest.backends.transformers.warmup import WARM_STEPS
    from loadtest.core.heap import GcPauses, settle_heap

    short = VARIANTS[name]
    pauses = GcPauses()
    torch.manual_seed(0)
    model = dummy_model(arch)
    torch.backends.cuda.enable_cudnn_sdp(False)  # the engine's default SDPA choice
    config, _ = decode_compile_config(None)

    def gen(bs: int, steps: int | None = None) -> float:
        ids = torch.full((bs, PROMPT), 65, device="cuda")
        kwargs = dict(
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
            cache_implementation="static",
            compile_config=config,
        )
        if steps is not None:
            kwargs["stopping_criteria"] = transformers.StoppingCriteriaList([StopAfterSteps(steps)])
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    t0 = time.perf_counter()
    if short:
        settle_heap()
    pauses.summary(reset=True)
    per_size = {}
    with batch_dynamic_while_warming(model):
        for bs in SIZES:
            per_size[bs] = round(gen(bs, WARM_STEPS if short else None), 2)
    gc_s = pauses.summary(reset=True)["total_ms"] / 1e3
    settle_heap()
    warm = time.perf_counter() - t0
    graphs = int(counters["stats"]["unique_graphs"])
    first = {bs: gen(bs) for bs in SIZES}
    second = {bs: gen(bs) for bs in SIZES}
    return {
        "warmup_s": round(warm, 1),
        "compile_s": round(compile_seconds(), 1),
        "gc_s": round(gc_s, 2),
        "per_size_s": per_size,
        "graphs": graphs,
        "graphs_after": int(counters["stats"]["unique_graphs"]),
        "first": {bs: round(s, 3) for bs, s in first.items()},
        "second": {bs: round(s, 3) for bs, s in second.items()},
    }


def main() -> None:
    rows = run_variants(child, VARIANTS, __file__)
    if rows is None:  # this was the child
        return
    print(
        "\n| variant | warm-up s (compile, gc) | s per size | graphs (after the full calls) "
        "| full call 1 / 2 at batch 2, s | at batch 16, s |"
    )
    print("|---|---|---|---|---|---|")
    for name, d in rows:
        if d is None:
            print(f"| {name} | failed | | | | |")
            continue
        sizes = ", ".join(f"{bs}: {s}" for bs, s in d["per_size_s"].items())
        f, s = d["first"], d["second"]
        print(
            f"| {name} | {d['warmup_s']} ({d['compile_s']}, {d['gc_s']}) | {sizes} "
            f"| {d['graphs']} ({d['graphs_after']}) | {f['2']} / {s['2']} | {f['16']} / {s['16']} |"
        )


if __name__ == "__main__":
    main()
