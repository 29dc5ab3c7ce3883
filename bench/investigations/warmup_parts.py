"""Where a cold compiled warm-up's time goes besides code generation, and levers on it. GPU
machine; each variant in a fresh process with empty inductor and Triton caches.

    PYTHONPATH=. python bench/investigations/warmup_parts.py [--model llama-3.2-1b] [--only 1,2,3,1,2,3]

Each variant loads ``dummy:<arch>``, then runs the engine's compiled warm-up in parts: a first
generate() of one token (torch.compile's set-up, which imports the compiler, and the eager
kernels' first use), a compiled generate() at batch 2 with the batch dimension marked dynamic
(the graph's compile), then batches 4, 8 and 16 (512-token prompts, 8 new tokens, static cache,
loadtest's compile options). Columns: seconds for each part and in all; torch's compile time;
its phases (dynamo's bytecode tracing, AOT autograd's metadata pass, inductor's code generation);
and how many of the torch modules the process imported had no bytecode cache to load (Python
then compiles their source). The profiled variant adds the share of the compile's profiled time
spent rebuilding fake tensors from the fake-tensor cache (``_output_from_cache_entry``: their
sizes and strides worked out symbolically, for the dynamic batch dimension) and in the matmul
decomposition (reshapes of a symbolic batch). The last two variants start from a settled heap
(``settle_heap``) as the engine's warm-up does, one with the collector paused throughout and the
garbage collected once after (``collector_paused``, what the engine does now): their warm-up
column is what the engine times (settling, the generate() calls, the final collection), gc the
collector's pauses within it.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_cache import dummy_model, run_variants

VARIANTS = {
    "the engine's sequence": "plain",
    "the compiler imported on a thread during the load": "thread",
    "fake-tensor cache off": "no_fake_cache",
    "the engine's sequence, compile profiled": "profiled",
    "the heap settled first, as the engine does": "settled",
    "the heap settled first, the collector paused, one collection after": "paused",
}
PROMPT, NEW, SIZES = 512, 8, (4, 8, 16)
PHASES = {
    "tracing": "bytecode_tracing",
    "aot_metadata": "aot_collect_metadata",
    "inductor": "compile_fx.<locals>.fw_compiler_base",
}


def child(name: str, arch: str) -> dict:
    import contextlib
    import threading

    import torch

    from loadtest.backends.transformers.compiling import (
        batch_dynamic_while_warming,
        compile_seconds,
        decode_compile_config,
        never_silently_eager,
    )

    how = VARIANTS[name]
    parts: dict[str, float] = {}
    begun = time.perf_counter()
    importer = None
    if how == "thread":  # what torch.compile's set-up imports, beside the load
        importer = threading.Thread(target=lambda: __import__("torch._inductor.compile_fx"))
        importer.start()
    if how == "no_fake_cache":
        import torch._dynamo

        torch._dynamo.config.fake_tensor_cache_enabled = False
    t = time.perf_counter()
    torch.manual_seed(0)
    model = dummy_model(arch)
    torch.backends.cuda.enable_cudnn_sdp(False)  # the engine's default SDPA choice
    never_silently_eager()
    config, _ = decode_compile_config(None)
    torch.cuda.synchronize()
    parts["load"] = time.perf_counter() - t
    if importer is not None:
        t = time.perf_counter()
        importer.join(timeout=120)
        parts["import_wait"] = time.perf_counter() - t

    def gen(bs: int, new: int) -> float:
        ids = torch.full((bs, PROMPT), 65, device="cuda")
        t = time.perf_counter()
        with torch.inference_mode():
            model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
                cache_implementation="static",
                compile_config=config,
            )
        torch.cuda.synchronize()
        return time.perf_counter() - t

    from loadtest.core.heap import collector_paused, process_gc_pauses, settle_heap

    pauses = process_gc_pauses()
    if how in ("settled", "paused"):  # the engine's warm-up starts from a settled heap
        t = time.perf_counter()
        settle_heap()
        parts["settle"] = time.perf_counter() - t
    pauses.summary(reset=True)
    profiler = None
    if how == "profiled":
        import cProfile

        profiler = cProfile.Profile()
    with collector_paused() if how == "paused" else contextlib.nullcontext():
        parts["first_generate"] = gen(2, 1)  # no decode step, so nothing compiled yet
        with batch_dynamic_while_warming(model):
            if profiler is not None:
                profiler.enable()
            parts["compiled_batch_2"] = gen(2, NEW)
            if profiler is not None:
                profiler.disable()
            parts["batches_4_8_16"] = sum(gen(bs, NEW) for bs in SIZES)
    if how in ("settled", "paused"):  # the warm-up's garbage, collected once (the engine's end)
        t = time.perf_counter()
        settle_heap()
        parts["final_collect"] = time.perf_counter() - t
    parts["gc"] = pauses.summary(reset=True)["total_ms"] / 1e3
    parts["all"] = time.perf_counter() - begun
    warm = ("settle", "first_generate", "compiled_batch_2", "batches_4_8_16", "final_collect")
    parts["warm_up"] = sum(parts.get(k, 0.0) for k in warm)  # what the engine times as its warm-up
    from torch._dynamo.utils import compilation_time_metrics

    row = {k: round(v, 2) for k, v in parts.items()}
    row["compile"] = round(compile_seconds(), 1)
    for label, key in PHASES.items():
        row[label] = round(sum(compilation_time_metrics.get(key, ())), 1)
    row["uncached_modules"] = uncached_torch_modules()
    if profiler is not None:
        row["profile_shares"] = profile_shares(profiler)
    return row


def uncached_torch_modules() -> str:
    """'N of M': the torch modules imported whose source had no bytecode cache beside it."""
    files = [
        m.__file__
        for name, m in list(sys.modules.items())
        if name.startswith("torch") and (getattr(m, "__file__", None) or "").endswith(".py")
    ]
    missing = sum(not Path(importlib.util.cache_from_source(f)).exists() for f in files)
    return f"{missing} of {len(files)}"


def profile_shares(profiler) -> dict[str, float]:
    """Shares of the profiled compile in the functions named above (cumulative time)."""
    import pstats

    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
    total = sum(tt for _, _, tt, _, _ in stats.values())
    wanted = {
        "fake tensors from the cache": ("fake_tensor.py", "_output_from_cache_entry"),
        "matmul decomposition": ("decompositions.py", "matmul"),
    }
    return {
        label: round(
            sum(ct for (f, _, fn), (_, _, _, ct, _) in stats.items() if f.endswith(s) and fn == n)
            / total,
            3,
        )
        for label, (s, n) in wanted.items()
    }


def main() -> None:
    rows = run_variants(child, VARIANTS, __file__)
    if rows is None:  # this was the child
        return
    print(
        "\n| variant | load s | first generate s | compiled batch 2 s | batches 4, 8, 16 s "
        "| all s | warm-up s (gc s) | compile s (tracing, AOT metadata, inductor) | torch modules "
        "without bytecode cache | profiled shares |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, d in rows:
        if d is None:
            print(f"| {name} | failed | | | | | | | | |")
            continue
        load = f"{d['load']} (+{d['import_wait']} waiting)" if "import_wait" in d else d["load"]
        print(
            f"| {name} | {load} | {d['first_generate']} | {d['compiled_batch_2']} "
            f"| {d['batches_4_8_16']} | {d['all']} | {d['warm_up']} ({d['gc']}) "
            f"| {d['compile']} ({d['tracing']}, "
            f"{d['aot_metadata']}, {d['inductor']}) | {d['uncached_modules']} "
            f"| {d.get('profile_shares', '')} |"
        )


if __name__ == "__main__":
    main()
