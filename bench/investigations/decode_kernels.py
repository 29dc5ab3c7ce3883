"""What a compiled decode step costs at each batch size, kernel by kernel: why a batch padded to
16 rows decodes slower than one of 2, and what padding every batch to the largest size (one
static graph, ``batch_buckets: [16]``) costs per step. GPU machine; each variant in a fresh
process with empty compile caches.

    PYTHONPATH=. python bench/investigations/decode_kernels.py [--model llama-3.2-1b] [--only 1,2]

Each variant compiles as the engine does (static cache for 512-token prompts and 96 new tokens,
loadtest's compile options, CUDA graphs) and warms its sizes. At each size, the decode step is
the difference of two generate() calls stopped after 96 and after 16 tokens, over the 80 steps
between (best of 3), so the prefill cancels; the same difference of two profiles gives each
kernel's GPU time per step. Printed: step ms, kernel time per step, and the kernels whose time
per step differs most between the smallest and the largest size.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_cache import dummy_model, run_variants, timed_generate

# (batch sizes warmed, batch marked dynamic, inductor options over loadtest's, attention: "sdpa",
# "packed", or "padded": packed with the decode steps at the largest size)
VARIANTS = {
    "one dynamic graph, transformers' SDPA, sizes 2, 4, 8, 16": ((2, 4, 8, 16), True, {}, "sdpa"),
    "one static graph, transformers' SDPA, size 16": ((16,), False, {}, "sdpa"),
    "one dynamic graph, no CUDA graphs, transformers' SDPA, sizes 2, 16": (
        (2, 16),
        True,
        {"triton.cudagraphs": False},
        "sdpa",
    ),
    "one dynamic graph, packed GQA SDPA, sizes 2, 4, 8, 16": ((2, 4, 8, 16), True, {}, "packed"),
    "one static graph, packed GQA SDPA, size 16": ((16,), False, {}, "packed"),
    # the prefill at the batch's rows, every decode step at 16 (pad_decode, the engine's default)
    "decode steps padded to 16, packed GQA SDPA, sizes 2, 4, 8, 16": (
        (2, 4, 8, 16),
        False,
        {},
        "padded",
    ),
}
PROMPT, NEW, SHORT = 512, 96, 16


def child(name: str, arch: str) -> dict:
    import contextlib

    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile

    from loadtest.backends.transformers.attention import pack_decode_attention
    from loadtest.backends.transformers.compiling import (
        FAST_COMPILE,
        batch_dynamic_while_warming,
        decode_compile_config,
    )
    from loadtest.backends.transformers.engine import StopAfterSteps
    from loadtest.backends.transformers.padded_decode import PaddedDecode
    from loadtest.backends.transformers.warmup import WARM_STEPS

    sizes, marked, extra, attn = VARIANTS[name]
    torch.manual_seed(0)
    model = dummy_model(arch)
    if attn in ("packed", "padded"):  # as the engine chooses it
        pack_decode_attention(model, {"mode": "static", "attn_implementation": None})
    padded = PaddedDecode(model) if attn == "padded" else None
    torch.backends.cuda.enable_cudnn_sdp(False)  # the engine's default SDPA choice
    config, _ = decode_compile_config({**FAST_COMPILE, **extra})

    greedy = dict(
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
        cache_implementation="static",
        compile_config=config,
    )

    def gen(bs: int, steps: int) -> float:
        stop = transformers.StoppingCriteriaList([StopAfterSteps(steps)])
        cache = {} if padded is None else padded.generate_kwargs(max(sizes), PROMPT + NEW)
        return timed_generate(model, bs, PROMPT, stopping_criteria=stop, **{**greedy, **cache})

    t0 = time.perf_counter()
    with batch_dynamic_while_warming(model) if marked else contextlib.nullcontext():
        for bs in sizes:
            gen(bs, WARM_STEPS)
    warmup_s = time.perf_counter() - t0

    def kernels(bs: int, steps: int) -> Counter:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            gen(bs, steps)
        per: Counter = Counter()
        for e in prof.events():
            if e.device_type.name == "CUDA" and e.device_time > 0:
                per[e.name[:90]] += e.device_time  # microseconds
        return per

    out = {}
    span = NEW - SHORT
    for bs in sizes:
        gen(bs, NEW)  # the full length once, outside the timing
        step_ms = min((gen(bs, NEW) - gen(bs, SHORT)) / span * 1e3 for _ in range(3))
        long, short = kernels(bs, NEW), kernels(bs, SHORT)
        per_step = {k: (long[k] - short.get(k, 0)) / span for k in long}
        per_step = {k: round(v, 2) for k, v in per_step.items() if v > 0.05}
        out[bs] = {
            "step_ms": round(step_ms, 3),
            "kernel_us": round(sum(per_step.values()), 1),
            "kernels": per_step,
        }
    # what it computes: greedy tokens for fixed prompts at the first size, to compare variants
    ids = (torch.arange(sizes[0] * PROMPT, device="cuda").reshape(sizes[0], PROMPT) % 1000)[:2]
    ids = ids.repeat(sizes[0] // 2, 1)
    cache = {} if padded is None else padded.generate_kwargs(max(sizes), PROMPT + NEW)
    with torch.inference_mode():
        seq = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), **{**greedy, **cache}
        )
    tokens = seq[:2, PROMPT : PROMPT + 32].flatten().tolist()
    return {"warmup_s": round(warmup_s, 1), "sizes": out, "tokens": tokens}


def main() -> None:
    rows = run_variants(child, VARIANTS, __file__)
    if rows is None:  # this was the child
        return
    first = next((d["tokens"] for _, d in rows if d is not None), None)
    print(
        "\n| variant | warm-up s (cold) | batch | decode step ms | GPU kernel time per step µs "
        "| kernels | greedy tokens as the first variant's |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, d in rows:
        if d is None:
            print(f"| {name} | failed | | | | | |")
            continue
        same = sum(a == b for a, b in zip(d["tokens"], first, strict=True))
        for bs, s in d["sizes"].items():
            print(
                f"| {name} | {d['warmup_s']} | {bs} | {s['step_ms']:.3f} | {s['kernel_us']} "
                f"| {len(s['kernels'])} | {same}/{len(first)} |"
            )
    for name, d in rows:
        if d is None:
            continue
        sizes = list(d["sizes"])
        lo, hi = d["sizes"][sizes[0]]["kernels"], d["sizes"][sizes[-1]]["kernels"]
        if len(sizes) > 1:
            grown = sorted(set(lo) | set(hi), key=lambda k: -abs(hi.get(k, 0) - lo.get(k, 0)))
            print(f"\n{name}: per-step µs at batch {sizes[0]} and {sizes[-1]}, largest changes")
            print(f"| kernel | b{sizes[0]} | b{sizes[-1]} |\n|---|---|---|")
            for k in grown[:15]:
                print(f"| `{k}` | {lo.get(k, 0):.1f} | {hi.get(k, 0):.1f} |")
        top = sorted(hi.items(), key=lambda kv: -kv[1])[:12]
        print(f"\n{name}: the largest kernels per step at batch {sizes[-1]}")
        print("| kernel | µs |\n|---|---|")
        for k, v in top:
            print(f"| `{k}` | {v:.1f} |")


if __name__ == "__main__":
    main()
