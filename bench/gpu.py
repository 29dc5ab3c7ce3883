"""GPU benchmark for the transformers backend (run on the GPU machine; figures -> docs/benchmarks.md).

    PYTHONPATH=. python bench/gpu.py --out DIR

Per mode on dummy:llama-3.2-1b bf16, 128 in / 128 out: TTFT, ITL, tok/s, dispatch lag, and the
decode step against the weights-read floor (parameter bytes / measured copy bandwidth): single
(eager, then compiled), static under a Poisson rate that keeps the engine saturated, and
continuous under the same rate. Harness overhead against a bare generate() loop is measured
by bench/overhead_e2e.py (both in one worker, on one compiled model).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

MODEL = "dummy:llama-3.2-1b"


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
    import yaml

    from loadtest.config.loading import parse_scenario
    from loadtest.session import run_scenario

    text = yaml.safe_dump(
        {
            "name": name,
            "backend": {"kind": "transformers", "model": MODEL, "device": "cuda", **backend},
            "workload": workload,
            "load": load,
        }
    )
    t = time.monotonic()
    m = run_scenario(parse_scenario(text, out / f"{name}.yml", []), out / name).metrics
    lat, tp = m["latency_ms"], m["throughput"]
    print(
        f"{name}: {m['status']} {tp['output_tokens_per_s']:.1f} tok/s  TTFT p50 {lat['ttft'].get('p50')} "
        f"p99 {lat['ttft'].get('p99')}  ITL p50 {lat['itl'].get('p50')} p99 {lat['itl'].get('p99')}  "
        f"lag p99 {lat['dispatch_lag'].get('p99')}  ({time.monotonic() - t:.0f} s, warmup {m['backend'].get('warmup_s')} s)",
        flush=True,
    )
    return m


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--skip-compile", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bw = copy_bandwidth_gbs()
    print(f"device copy bandwidth: {bw:.0f} GB/s", flush=True)
    fixed = {"input_tokens": 128, "output_tokens": 128}
    modes: dict = {}
    results = {"copy_bandwidth_gbs": bw, "modes": modes}
    single_load = {
        "arrival": {"kind": "concurrency", "users": 1},
        "requests": 8,
        "warmup_requests": 1,
    }
    poisson = {
        "arrival": {"kind": "poisson", "rate": 6},
        "duration": "40s",
        "warmup": "5s",
        "drain_timeout": "60s",
    }
    modes["single"] = run("single", {"mode": "single"}, single_load, fixed, args.out)
    modes["static-poisson"] = run(
        "static-poisson",
        {"mode": "static", "max_batch_size": 32, "max_wait_ms": 50},
        poisson,
        fixed,
        args.out,
    )
    modes["continuous-poisson"] = run(
        "continuous-poisson", {"mode": "continuous", "max_batch_size": 32}, poisson, fixed, args.out
    )
    if not args.skip_compile:
        modes["single-compiled"] = run(
            "single-compiled", {"mode": "single", "compile": True}, single_load, fixed, args.out
        )
    # Copy bandwidth counts bytes read + written: the DRAM's total traffic rate, so reading the
    # weights once per decode step takes parameter_bytes / bw.
    pbytes = modes["single"]["backend"]["parameter_bytes"]
    results["parameter_bytes"] = pbytes
    results["weights_read_floor_ms"] = pbytes / (bw * 1e9) * 1000
    _report(results, args.out)


def _report(results: dict, out: Path) -> None:
    bw, pbytes, floor_ms = (
        results["copy_bandwidth_gbs"],
        results["parameter_bytes"],
        results["weights_read_floor_ms"],
    )
    print(f"\nweights-read floor: {floor_ms:.3f} ms/step ({pbytes / 1e9:.2f} GB at {bw:.0f} GB/s)")
    print(
        "\n| mode | status | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | out tok/s | dispatch lag p99 | ITL p50 / floor |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, m in results["modes"].items():
        lat = m["latency_ms"]
        print(
            f"| {name} | {m['status']} | {lat['ttft'].get('p50')} | {lat['ttft'].get('p99')} | {lat['itl'].get('p50')} | "
            f"{lat['itl'].get('p99')} | {m['throughput']['output_tokens_per_s']:.1f} | {lat['dispatch_lag'].get('p99')} | "
            f"{(lat['itl'].get('p50') or 0) / floor_ms:.1f}x |"
        )
    slim = {k: v for k, v in results.items() if k != "modes"}
    slim["modes"] = {
        k: {
            kk: m[kk]
            for kk in ("status", "latency_ms", "throughput", "backend", "validity", "requests")
        }
        for k, m in results["modes"].items()
    }
    (out / "gpu_results.json").write_text(json.dumps(slim, indent=1, default=str))


if __name__ == "__main__":
    main()
