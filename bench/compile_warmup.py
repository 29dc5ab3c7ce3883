"""Cold compiled warm-up, by compile setting: how long the compiled batch sizes take to build
from an empty compile cache, where that time goes, and the decode speed they give. GPU machine;
each variant in a fresh process with empty inductor and Triton caches.

    PYTHONPATH=. python bench/compile_warmup.py [--model llama-3.2-1b] [--only 1,2]

Each variant runs generate (static cache, 256-token prompts, 32 new tokens) at each of its batch
sizes, as the engine's warm-up does, then times 64 tokens at batch 2 and 16 (best of 3), and runs
one batch size it never warmed (3) to see whether that builds a new graph. Columns: warm-up s,
graphs built by dynamo, the time torch's own compile phases report, ms per token.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_cache import dummy_model, run_cold, timed_generate, variant_args

# name -> (dynamic setting given to transformers' CompileConfig, batch sizes warmed)
VARIANTS = {
    "automatic dynamic (transformers' default), sizes 1,2,4,8,16": (None, (1, 2, 4, 8, 16)),
    "dynamic batch from the first compile, sizes 2,4,8,16": (True, (2, 4, 8, 16)),
    "dynamic batch from the first compile, sizes 1,2,4,8,16": (True, (1, 2, 4, 8, 16)),
}
PROMPT, NEW, TIMED = 256, 32, 64


def child(name: str, arch: str) -> dict:
    import torch
    import transformers
    from torch._dynamo.utils import counters

    dynamic, sizes = VARIANTS[name]
    model = dummy_model(arch)
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

    t = time.perf_counter()
    for bs in sorted(sizes, reverse=True):  # the largest first: the cache is sized once
        gen(bs, NEW)
    warm = time.perf_counter() - t
    graphs = int(counters["stats"]["unique_graphs"])
    step = {bs: min(gen(bs, TIMED) for _ in range(3)) / TIMED * 1e3 for bs in (2, 16)}
    t = time.perf_counter()
    gen(3, NEW)
    unseen = time.perf_counter() - t
    # torch's own compile phases (dynamo tracing, AOT, inductor codegen, ...), summed
    from torch._dynamo.utils import compilation_time_metrics

    phases = {k: round(sum(v), 1) for k, v in compilation_time_metrics.items() if sum(v) >= 0.5}
    return {
        "warmup_s": round(warm, 1),
        "graphs": graphs,
        "graphs_after_unseen": int(counters["stats"]["unique_graphs"]),
        "unseen_s": round(unseen, 2),
        "ms_b2": step[2],
        "ms_b16": step[16],
        "phases": phases,
    }


def main() -> None:
    parsed = variant_args(child, VARIANTS)
    if parsed is None:  # this was the child
        return
    args, chosen = parsed
    rows = []
    for name in chosen:
        r = run_cold(__file__, ["--child", name, "--model", args.model])
        if r.returncode:
            rows.append((name, None, r.stderr.strip()[-1500:]))
            print(f"{name}: failed\n{r.stderr.strip()[-1500:]}", flush=True)
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])
        rows.append((name, d, None))
        print(f"{name}: {json.dumps(d)}", flush=True)
    print("\n| variant | warm-up s | graphs | unseen size 3: s, graphs | ms/token b2 | b16 |")
    print("|---|---|---|---|---|---|")
    for name, d, _err in rows:
        if d is None:
            print(f"| {name} | failed | | | | |")
            continue
        print(
            f"| {name} | {d['warmup_s']} | {d['graphs']} | {d['unseen_s']}, "
            f"{d['graphs_after_unseen']} | {d['ms_b2']:.2f} | {d['ms_b16']:.2f} |"
        )


if __name__ == "__main__":
    main()
