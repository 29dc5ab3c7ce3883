"""Shape discipline on the GPU, side by side: the chat-gpu scenario under each attention and
prompt-bucket setting, one after another on one machine, and a table of what each delivered.

    PYTHONPATH=. python bench/shapes.py [--duration 30s] [--rate 8] [--out /tmp/shapes]

Variants: the defaults (flash/efficient/math SDPA, no prompt padding), cuDNN attention allowed,
64-token prompt buckets, and both; continuous batching with and without CUDA graphs; static
mode with ``compile: true`` (its warm-up, and any recompilation inside the window), with the
default batch buckets (powers of two), coarser ones and one size (a static graph), with
torch's own inductor passes; each run compiles from a cold cache (``--only 8,13,8,13`` repeats
variants, each run cold) except the one that says it reuses another's. Columns: offered and delivered req/s, steady or overloaded,
TTFT p50/p99, ITL p50, the decode step and MBU from the roofline, GPU kernel-active time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CUDNN = "backend.sdpa_backends=[flash,efficient,cudnn,math]"
VARIANTS = {
    "defaults (no cuDNN SDPA, no bucket)": [],
    "no cuDNN SDPA, bucket 64": ["backend.prompt_bucket=64"],
    "cuDNN SDPA allowed, bucket 64": [CUDNN, "backend.prompt_bucket=64"],
    "cuDNN SDPA allowed, no bucket (torch's own choice)": [CUDNN],
    "continuous (the manager's choice)": ["backend.mode=continuous"],
    "continuous, CUDA graphs": [
        "backend.mode=continuous",
        "backend.continuous.use_cuda_graph=true",
    ],
    "continuous, no CUDA graphs": [
        "backend.mode=continuous",
        "backend.continuous.use_cuda_graph=false",
    ],
    "static, compile: true": ["backend.compile=true"],
    "static, compile: true, batch buckets 1,4,16": [
        "backend.compile=true",
        "backend.batch_buckets=[1,4,16]",
    ],
    "static, compile: true, batch buckets 4,16": [
        "backend.compile=true",
        "backend.batch_buckets=[4,16]",
    ],
    "static, compile: true, again (compile cache warm)": ["backend.compile=true"],
    "static, compile: true, batch buckets 1,2,4,8,16 (a graph for size 1 too)": [
        "backend.compile=true",
        "backend.batch_buckets=[1,2,4,8,16]",
    ],
    "static, compile: true, torch's own inductor passes (compile_options: {})": [
        "backend.compile=true",
        "backend.compile_options={}",
    ],
    "static, compile: true, as before (batch buckets 1,2,4,8,16, torch's own passes)": [
        "backend.compile=true",
        "backend.batch_buckets=[1,2,4,8,16]",
        "backend.compile_options={}",
    ],
    # issue 14's "today": every batch size 1..16 warmed (two graphs: size 1, then the rest),
    # torch's own passes, transformers' own SDPA
    "static, compile: true, as filed (every batch size 1..16, torch's own passes)": [
        "backend.compile=true",
        "backend.pad_decode=false",
        "backend.batch_buckets=false",
        "backend.compile_options={}",
        "backend.attn_implementation=sdpa",
    ],
    # one static graph: every batch padded to 16 rows, so the warm-up compiles one size, unmarked
    "static, compile: true, one static graph (batch buckets [16])": [
        "backend.compile=true",
        "backend.batch_buckets=[16]",
    ],
    # transformers' own SDPA, which copies the KV cache per query head, where loadtest packs
    # a decode step's query heads onto their key/value heads
    "static, compile: true, transformers' SDPA": [
        "backend.compile=true",
        "backend.attn_implementation=sdpa",
    ],
    "defaults, transformers' SDPA": ["backend.attn_implementation=sdpa"],
    # each decode step at its batch's bucket, one graph with a dynamic batch dimension
    "static, compile: true, decode steps unpadded (one dynamic graph)": [
        "backend.compile=true",
        "backend.pad_decode=false",
    ],
}
# variants that reuse an earlier variant's compile cache (to show what a warm cache saves)
WARM_FROM = {"static, compile: true, again (compile cache warm)": "static, compile: true"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default="scenarios/chat-gpu.yml")
    ap.add_argument("--duration", default="30s")
    ap.add_argument("--rate", default="8")
    ap.add_argument("--out", type=Path, default=Path("/tmp/shapes"))
    ap.add_argument("--only", default=None, help="comma list of variant numbers (1-based)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds a variant may take")
    args = ap.parse_args()
    rows = []
    caches: dict[str, Path] = {}  # the compile cache of each variant's latest run
    names = list(VARIANTS)
    chosen = [names[int(i) - 1] for i in args.only.split(",")] if args.only else names
    for i, name in enumerate(chosen):
        out = args.out / f"v{i}"
        sets = [f"load.duration={args.duration}", f"load.arrival.rate={args.rate}", *VARIANTS[name]]
        cmd = [
            sys.executable,
            "-m",
            "loadtest",
            "run",
            args.scenario,
            "-o",
            str(out),
            "-q",
            "--overwrite",
        ]
        for s in sets:
            cmd += ["--set", s]
        # a cold compile cache for each run (a variant listed twice runs cold twice): a graph
        # another run compiled must not make this one's warm-up look cheaper
        cache = caches.get(WARM_FROM.get(name, ""), args.out / f"cache-{i}")
        caches[name] = cache
        env = {
            **os.environ,
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
            "TRITON_CACHE_DIR": str(cache / "triton"),
        }
        t = time.monotonic()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        except subprocess.TimeoutExpired:
            print(f"{name}: over {args.timeout:g} s, stopped", flush=True)
            continue
        wall = time.monotonic() - t
        path = out / "metrics.json"
        if not path.exists():
            print(f"{name}: no result (exit {r.returncode})\n{r.stderr[-2000:]}", flush=True)
            continue
        m = json.loads(path.read_text())
        st, lat = m.get("stability") or {}, m.get("latency_ms") or {}
        dec = ((m.get("roofline") or {}).get("decode")) or {}
        dev = (((m.get("gpu") or {}).get("devices")) or [{}])[0]
        rows.append(
            (
                name,
                st.get("offered_rps"),
                st.get("delivered_rps"),
                "steady" if st.get("steady") else "OVERLOADED",
                lat.get("ttft", {}).get("p50"),
                lat.get("ttft", {}).get("p99"),
                lat.get("itl", {}).get("p50"),
                dec.get("step_ms"),
                dec.get("mbu"),
                (dev.get("utilization_gpu_pct") or {}).get("mean"),
                m["backend"].get("sdpa_backends"),
                m["backend"].get("prompt_bucket"),
                _warmup_cell(m["backend"]),
                m["backend"].get("recompiles_in_window"),
                wall,
            )
        )
        # the row's key figures as they come: a call cut short still shows the runs it finished
        print(
            f"{name}: exit {r.returncode}, {wall:.0f} s, warm-up {rows[-1][12]} s, "
            f"{rows[-1][3]}, ITL p50 {_fmt(rows[-1][6])} ms",
            flush=True,
        )
    print(
        "\n| variant | offered req/s | delivered req/s | stability | TTFT p50 ms | TTFT p99 ms | "
        "ITL p50 ms | decode step ms | MBU | GPU kernel-active % | SDPA kernels | bucket | "
        "warm-up s (compile, gc) | recompiles in window | wall s |"
    )
    print("|" + "---|" * 15)
    for row in rows:
        print("| " + " | ".join(_fmt(x) for x in row) + " |")


def _warmup_cell(backend: dict) -> str | None:
    """Warm-up seconds, and what of them torch.compile and the garbage collector took."""
    total, compiling = backend.get("warmup_s"), backend.get("warmup_compile_s")
    if total is None or not compiling:
        return total
    return f"{total:.1f} (compile {compiling:.1f}, gc {backend.get('warmup_gc_s', 0):.1f})"


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}" if x < 1 else f"{x:.4g}"
    if isinstance(x, list):
        return "/".join(x)
    return str(x)


if __name__ == "__main__":
    main()
