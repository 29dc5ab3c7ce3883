"""Inside-the-run benchmark on the GPU machine: telemetry, profiler window, roofline (issue 4).

    PYTHONPATH=. python bench/gpu_inside.py --out DIR      # figures -> docs/benchmarks.md

One static-mode run of dummy:llama-3.2-1b (bf16) under Poisson load with GPU sampling every
250 ms and a 1 s profiler window in steady state, then a single-stream run. Prints: the sampler's
own CPU cost, NVML energy against integrated power, the trace (size, event count, valid Chrome
trace JSON), the top operators, the kernel summary, MBU/MFU for decode and prefill with the
diagnosis, and the environment warnings.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import yaml

MODEL = "dummy:llama-3.2-1b"


def run(name: str, backend: dict, load: dict, out: Path, profile: dict | None = None) -> dict:
    from loadtest.config.loading import parse_scenario
    from loadtest.session import run_scenario

    data = {
        "name": name,
        "backend": {"kind": "transformers", "model": MODEL, "device": "cuda", **backend},
        "workload": {"input_tokens": 128, "output_tokens": 128},
        "load": load,
        "telemetry": {"interval": "250ms"},
    }
    if profile:
        data["profile"] = profile
    t = time.monotonic()
    m = run_scenario(
        parse_scenario(yaml.safe_dump(data), out / f"{name}.yml", []), out / name
    ).metrics
    print(
        f"\n== {name}: {m['status']} in {time.monotonic() - t:.0f} s; {m['throughput']['output_tokens_per_s']:.1f} "
        f"tok/s; TTFT p50 {m['latency_ms']['ttft'].get('p50')} ms, ITL p50 {m['latency_ms']['itl'].get('p50')} ms, "
        f"mean {m['latency_ms']['itl'].get('mean')} ms, p99 {m['latency_ms']['itl'].get('p99')} ms; "
        f"{m['requests']['completed']} completed, {m['requests'].get('profiled', 0)} profiled",
        flush=True,
    )
    return m


def report(m: dict, out: Path) -> None:
    gpu = m["gpu"]
    if not gpu.get("available"):
        print("GPU telemetry unavailable:", gpu.get("reason"))
    else:
        d, s = gpu["devices"][0], gpu["sampler"]
        print(
            f"sampler: {s['samples']} samples, {s['errors']} errors, {s['cpu_s']} s CPU over {s['wall_s']} s = "
            f"{s['cpu_pct_of_one_core']}% of one core"
        )
        e, ei = d["energy_j"], d["energy_integrated_j"]
        print(
            f"energy over the window: counter {e} J, integrated power {ei} J, difference "
            f"{100 * (e - ei) / ei:+.2f}%"
            if e and ei
            else f"energy: {e} / {ei}"
        )
        for key in (
            "utilization_gpu_pct",
            "gpm_sm_activity_pct",
            "gpm_sm_occupancy_pct",
            "gpm_tensor_activity_pct",
            "gpm_dram_bw_util_pct",
            "power_w",
            "clocks_sm_mhz",
            "memory_used_mib",
            "temperature_c",
        ):
            print(f"  {key}: {d.get(key)}")
        print(
            f"  joules/output token {d['joules_per_output_token']}; throttle reasons {d['throttle_reasons_seen']}; "
            f"unavailable {d['unavailable']}"
        )
        rows = (out / m["name"] / "gpu.csv").read_text().splitlines()
        print(f"gpu.csv: {len(rows) - 1} rows; header: {rows[0]}")
    p = m.get("profile")
    if p:
        path = out / m["name"] / "trace.json.gz"
        trace = json.loads(gzip.decompress(path.read_bytes()))
        events = trace.get("traceEvents", [])
        kinds = {e.get("cat") for e in events if isinstance(e, dict)}
        print(
            f"profile window {p['window']}, {p['requests_flagged']} requests flagged; trace {path.stat().st_size / 1e6:.1f} MB "
            f"gz, {len(events)} events, categories {sorted(k for k in kinds if k)[:12]}; captured {p.get('captured_s')} s, "
            f"export {p.get('export_s')} s, tables {p.get('tables_s')} s"
        )
        print(f"kernels: {p.get('kernel_summary')}")
        print("| operator | calls | self CUDA µs | self CPU µs |\n|---|---|---|---|")
        for op in p["top_ops"][:12]:
            print(
                f"| {op['name']} | {op['calls']} | {op['self_cuda_time_us']} | {op['self_cpu_time_us']} |"
            )
    r = m.get("roofline")
    if r:
        print("roofline peaks:", r["peaks"])
        print("decode:", r.get("decode"))
        print("prefill:", r.get("prefill"))
        print("diagnosis:", json.dumps(r["diagnosis"], indent=1))
    print("warnings:", m["validity"]["warnings"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument(
        "--compiled",
        action="store_true",
        help="also single-stream with static cache + torch.compile",
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    static = run(
        "static-inside",
        {"mode": "static", "max_batch_size": 16, "max_wait_ms": 20},
        {
            "arrival": {"kind": "poisson", "rate": 5},
            "duration": f"{args.seconds}s",
            "warmup": "5s",
            "drain_timeout": "60s",
        },
        args.out,
        profile={"start": "15s", "duration": "1s"},
    )
    report(static, args.out)
    single = run(
        "single-inside",
        {"mode": "single"},
        {"arrival": {"kind": "concurrency", "users": 1}, "requests": 6, "warmup_requests": 1},
        args.out,
    )
    report(single, args.out)
    if args.compiled:
        report(
            run(
                "single-compiled",
                {"mode": "single", "compile": True},
                {
                    "arrival": {"kind": "concurrency", "users": 1},
                    "requests": 6,
                    "warmup_requests": 1,
                },
                args.out,
            ),
            args.out,
        )


if __name__ == "__main__":
    main()
