"""Cold compile time against decode speed: transformers' whole-model compile (what ``compile:
true`` uses) against regional compilation (each decoder layer compiled; the layers share one
graph). GPU machine; each variant in a fresh process with an empty compile cache.

    PYTHONPATH=. python bench/investigations/regional_compile.py [--model llama-3.2-1b]

Prints, per variant: warm-up (generate at batch 1, 4 and 16, 256-token prompts, 128 new tokens,
static cache: every graph built) and the time per generated token at batch 1 and 16 after it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_cache import dummy_model, run_cold, timed_generate, variant_args

VARIANTS = ("whole model (transformers' auto-compile)", "regional, default mode", "eager")
NEW = 128


def child(variant: str, arch: str) -> dict:
    import torch

    model = dummy_model(arch)
    kwargs = dict(
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
        cache_implementation="static",
    )
    if variant.startswith("regional"):
        # each layer's index is an int attribute the cache update reads: unspecialised, the
        # layers share one graph instead of one compile each
        torch._dynamo.config.allow_unspec_int_on_nn_module = True
        torch._dynamo.config.recompile_limit = 64
        model.generation_config.disable_compile = True  # not the whole forward
        for layer in model.model.layers:
            layer.compile(fullgraph=True)
    elif variant == "eager":
        model.generation_config.disable_compile = True

    def gen(bs: int) -> float:
        return timed_generate(model, bs, 256, **kwargs)

    t = time.perf_counter()
    for bs in (1, 4, 16):
        gen(bs)
    warm = time.perf_counter() - t
    step = {bs: min(gen(bs) for _ in range(3)) / NEW * 1e3 for bs in (1, 16)}
    return {"warmup_s": round(warm, 1), "ms_per_token_b1": step[1], "ms_per_token_b16": step[16]}


def main() -> None:
    parsed = variant_args(child, VARIANTS)
    if parsed is None:  # this was the child
        return
    args, chosen = parsed
    print("| variant | warm-up s (batch 1, 4, 16) | ms/token batch 1 | ms/token batch 16 |")
    print("|---|---|---|---|")
    for v in chosen:
        r = run_cold(__file__, ["--child", v, "--model", args.model])
        if r.returncode:
            print(f"| {v} | failed: {r.stderr.strip().splitlines()[-1][:200]} | | |", flush=True)
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])
        print(
            f"| {v} | {d['warmup_s']} | {d['ms_per_token_b1']:.2f} | {d['ms_per_token_b16']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
