"""GPU benchmark for the transformers backend (run on the GPU machine; figures -> docs/benchmarks.md).

    PYTHONPATH=. python bench/gpu.py --out DIR

1. Harness overhead: static mode, batch 1/8/32, 128 in / 128 out: loadtest's output tok/s
   against a bare loop calling the same generate() with the same settings, side by side.
2. Per mode on dummy:llama-3.2-1b bf16: TTFT, ITL, tok/s, decode step vs the weights-read floor.
3. Dispatch lag p99 at a Poisson rate that keeps the engine saturated.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

MODEL = "dummy:llama-3.2-1b"


_LOADED = None  # the bare loop's model, kept for the life of its process (compiled graphs too)


def bare_loop(batch_sizes, reps: int, n_in: int = 128, n_out: int = 128, compile: bool = False,
              keep: bool = False, warm_all: bool = False) -> dict:
    global _LOADED
    import torch

    from loadtest.backends.model_loading import load_model

    spec = {"model": MODEL, "device": "cuda", "dtype": "bfloat16", "seed": 0, "attn_implementation": None,
            "trust_remote_code": False, "mode": "static", "compile": False}
    model, device, info = _LOADED or load_model(spec, ".")
    if keep:
        _LOADED = (model, device, info)
    out = {"parameter_bytes": info["parameter_bytes"]}
    for bs in batch_sizes:
        ids = torch.full((bs, n_in), 65, dtype=torch.long, device=device)
        mask = torch.ones_like(ids)
        kw = dict(max_new_tokens=n_out, min_new_tokens=n_out, do_sample=False, pad_token_id=0, eos_token_id=None)
        if compile:  # what the engine worker passes with compile: true
            kw["cache_implementation"] = "static"
        def measured() -> float:
            """Seconds for ``reps`` generate() calls, after one untimed call of the same shape
            (a static cache compiles for its exact length)."""
            model.generate(input_ids=ids, attention_mask=mask, **(kw if compile else
                                                                  {**kw, "max_new_tokens": 4, "min_new_tokens": 4}))
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(reps):
                model.generate(input_ids=ids, attention_mask=mask, **kw)
            torch.cuda.synchronize()
            return time.perf_counter() - t

        with torch.inference_mode():
            if compile and warm_all and not info.get(f"warmed_all_{bs}"):
                # as loadtest's warm-up does for static batching: every batch size 1..bs, so the
                # compiled graph is the same one (dynamic in the batch dimension after two sizes);
                # first the same measurement with the graph compiled for this size alone
                print(f"bare loop bs={bs}, compiled for this size only: {reps * bs * n_out / measured():.1f} tok/s",
                      flush=True)
                for k in range(1, bs + 1):
                    small = ids[:k]
                    model.generate(input_ids=small, attention_mask=torch.ones_like(small), **kw)
                info[f"warmed_all_{bs}"] = True
            dt = measured()
        out[bs] = reps * bs * n_out / dt
        print(f"bare loop bs={bs}: {out[bs]:.1f} tok/s ({dt / reps / n_out * 1000:.2f} ms/step)", flush=True)
    if not keep:
        del model
        torch.cuda.empty_cache()
    return out


def copy_bandwidth_gbs() -> float:
    import torch

    a = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / 10
    del a, b
    return 2 * 2 * 2**30 / dt / 1e9  # bytes read + written


def run(name: str, backend: dict, load: dict, workload: dict, out: Path) -> dict:
    from loadtest.scenario_file import parse_scenario
    from loadtest.session import run_scenario
    import yaml

    text = yaml.safe_dump({"name": name, "backend": {"kind": "transformers", "model": MODEL, "device": "cuda",
                                                      **backend}, "workload": workload, "load": load})
    t = time.monotonic()
    m = run_scenario(parse_scenario(text, out / f"{name}.yml", []), out / name).metrics
    lat, tp = m["latency_ms"], m["throughput"]
    print(f"{name}: {m['status']} {tp['output_tokens_per_s']:.1f} tok/s  TTFT p50 {lat['ttft'].get('p50')} "
          f"p99 {lat['ttft'].get('p99')}  ITL p50 {lat['itl'].get('p50')} p99 {lat['itl'].get('p99')}  "
          f"lag p99 {lat['dispatch_lag'].get('p99')}  ({time.monotonic() - t:.0f} s, warmup {m['backend'].get('warmup_s')} s)",
          flush=True)
    return m


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch-sizes", default="1,8,32")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--overhead-only", action="store_true", help="only the bare-loop comparison")
    ap.add_argument("--compile", action="store_true", help="overhead with static cache + torch.compile on both sides")
    ap.add_argument("--pairs", type=int, default=2, help="interleaved bare/loadtest pairs per batch size")
    ap.add_argument("--bare-warm-all", action="store_true",
                    help="with --compile: the bare loop first runs every batch size 1..N, as loadtest's warm-up does")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    t_start = time.monotonic()
    bw = copy_bandwidth_gbs()
    print(f"device copy bandwidth: {bw:.0f} GB/s", flush=True)
    fixed = {"input_tokens": 128, "output_tokens": 128}
    bare: dict = {}
    results = {"copy_bandwidth_gbs": bw, "bare": bare, "overhead": {}, "modes": {}}
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    # Side by side, like for like: the bare loop runs in a spawned process, as the engine worker
    # does, immediately before loadtest's run at the same batch size, ``--pairs`` times
    # interleaved. With --compile the bare process is kept for all pairings (it compiles each
    # batch shape once; loadtest's run compiles in its own warm-up, outside its window).
    pool = ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) if args.compile else None
    for bs in sizes:
        bare_runs, ours_runs = [], []
        for _ in range(args.pairs):
            if pool is not None:
                b = pool.submit(bare_loop, [bs], args.reps, compile=True, keep=True, warm_all=args.bare_warm_all).result()
            else:
                with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as fresh:
                    b = fresh.submit(bare_loop, [bs], args.reps).result()
            bare_runs.append(b[bs])
            bare["parameter_bytes"] = b["parameter_bytes"]
            m = run(f"static-bs{bs}", {"mode": "static", "max_batch_size": bs, "max_wait_ms": 2000, "compile": args.compile},
                    {"arrival": {"kind": "burst"}, "requests": args.reps * bs}, fixed, args.out)
            ours_runs.append(m["throughput"]["output_tokens_per_s"])
        bare[bs] = max(bare_runs)
        ours = max(ours_runs)
        ratios = sorted(o / b for o, b in zip(ours_runs, bare_runs))
        results["overhead"][bs] = {"loadtest": ours, "bare": bare[bs], "ratio": ours / bare[bs],
                                   "pair_ratios": ratios, "bare_runs": bare_runs, "loadtest_runs": ours_runs}
        print(f"batch {bs}: pair ratios {', '.join(f'{r:.3f}' for r in ratios)}", flush=True)
    if pool is not None:
        pool.shutdown()
    # Copy bandwidth counts bytes read + written: the DRAM's total traffic rate, so reading the
    # weights once per decode step takes parameter_bytes / bw.
    floor_ms = bare["parameter_bytes"] / (bw * 1e9) * 1000
    results["weights_read_floor_ms"] = floor_ms
    if args.overhead_only:
        results["modes"] = {}
        return _report(results, floor_ms, args.out)
    single = run("single", {"mode": "single"}, {"arrival": {"kind": "concurrency", "users": 1}, "requests": 8,
                                                "warmup_requests": 1}, fixed, args.out)
    results["modes"]["single"] = single
    sat = run("static-poisson", {"mode": "static", "max_batch_size": 32, "max_wait_ms": 50},
              {"arrival": {"kind": "poisson", "rate": 6}, "duration": "40s", "warmup": "5s", "drain_timeout": "60s"},
              fixed, args.out)
    results["modes"]["static-poisson"] = sat
    if not args.skip_compile and time.monotonic() - t_start < 330:
        results["modes"]["single-compiled"] = run(
            "single-compiled", {"mode": "single", "compile": True},
            {"arrival": {"kind": "concurrency", "users": 1}, "requests": 8, "warmup_requests": 1}, fixed, args.out)
    _report(results, floor_ms, args.out)


def _report(results: dict, floor_ms: float, out: Path) -> None:
    print("\n| batch | bare loop tok/s (runs) | loadtest tok/s (runs) | best / best | per-pair ratios |\n|---|---|---|---|---|")
    for bs, o in results["overhead"].items():
        print(f"| {bs} | {o['bare']:.1f} ({', '.join(f'{x:.1f}' for x in o['bare_runs'])}) | {o['loadtest']:.1f} "
              f"({', '.join(f'{x:.1f}' for x in o['loadtest_runs'])}) | {o['ratio']:.3f} | "
              f"{', '.join(f'{r:.3f}' for r in o['pair_ratios'])} |")
    bw, pbytes = results["copy_bandwidth_gbs"], results["bare"]["parameter_bytes"]
    print(f"\nweights-read floor: {floor_ms:.3f} ms/step ({pbytes / 1e9:.2f} GB at {bw:.0f} GB/s)")
    print("\n| mode | status | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | out tok/s | dispatch lag p99 | ITL p50 / floor |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, m in results["modes"].items():
        lat = m["latency_ms"]
        print(f"| {name} | {m['status']} | {lat['ttft'].get('p50')} | {lat['ttft'].get('p99')} | {lat['itl'].get('p50')} | "
              f"{lat['itl'].get('p99')} | {m['throughput']['output_tokens_per_s']:.1f} | {lat['dispatch_lag'].get('p99')} | "
              f"{(lat['itl'].get('p50') or 0) / floor_ms:.1f}x |")
    slim = {k: v for k, v in results.items() if k != "modes"}
    slim["modes"] = {k: {kk: m[kk] for kk in ("status", "latency_ms", "throughput", "backend", "validity", "requests")}
                     for k, m in results["modes"].items()}
    (out / "gpu_results.json").write_text(json.dumps(slim, indent=1, default=str))


if __name__ == "__main__":
    main()
