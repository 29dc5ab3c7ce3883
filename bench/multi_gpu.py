"""Several GPUs: replicas and tensor parallelism. Run on a machine with two GPUs (the
``nvidia-h200-x2`` kind); one call, one table. Not run yet: no two-GPU machine has been lent to
this project, so docs/benchmarks.md has no figures from it.

    PYTHONPATH=. python bench/multi_gpu.py --out /tmp/multi [--only 1,2,3]

1. dummy:llama-3.1-8b, bf16, static batches of up to 32, 128 in / 128 out, a closed loop of
   64 users (saturation): output tok/s on one GPU against two replicas (cuda:0, cuda:1).
2. The same model, TP=1 against TP=2 (cuda:0,1): ITL at batch 1 and 16 (closed loops of 1 and
   16 users, batches of up to 16).
3. dummy:llama-3.1-70b under TP=2 (it does not fit one GPU in bf16 with room for a KV cache):
   TTFT and ITL at batch 1 and 8.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

FIXED = {"input_tokens": 128, "output_tokens": 128}


def closed(users: int, requests: int) -> dict:
    return {
        "arrival": {"kind": "concurrency", "users": users},
        "requests": requests,
        "warmup_requests": users,
        "drain_timeout": "300s",
    }


def run(name: str, backend: dict, load: dict, out: Path) -> dict:
    import yaml

    from loadtest.config.loading import parse_scenario
    from loadtest.session import run_scenario

    text = yaml.safe_dump(
        {
            "name": name,
            "backend": {"kind": "transformers", "start_timeout": "30m", **backend},
            "workload": FIXED,
            "load": load,
        }
    )
    t = time.monotonic()
    m = run_scenario(parse_scenario(text, out / f"{name}.yml", []), out / name).metrics
    lat, tp = m["latency_ms"], m["throughput"]
    row = {
        "name": name,
        "status": m["status"],
        "tok_s": tp["output_tokens_per_s"],
        "ttft_p50": lat["ttft"].get("p50"),
        "itl_p50": lat["itl"].get("p50"),
        "itl_p99": lat["itl"].get("p99"),
        "warmup_s": m["backend"].get("warmup_s"),
        "peak_mem_mb": m["backend"].get("peak_mem_mb"),
        "seconds": round(time.monotonic() - t),
        "failure": (m.get("harness") or {}).get("failure") or m["backend"].get("error"),
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default="1,2,3")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    gpus = torch.cuda.device_count()
    if gpus < 2:
        raise SystemExit(f"needs two GPUs; this machine has {gpus}")
    only = {int(x) for x in args.only.split(",")}
    rows = []
    b8 = {"model": "dummy:llama-3.1-8b", "mode": "static", "max_wait_ms": 20}
    if 1 in only:
        sat = closed(64, 512)
        rows.append(
            run("8b-1gpu-b32", {**b8, "device": "cuda:0", "max_batch_size": 32}, sat, args.out)
        )
        rows.append(
            run("8b-2replicas-b32", {**b8, "devices": ["cuda:0", "cuda:1"], "max_batch_size": 32},
                sat, args.out)
        )  # fmt: skip
    if 2 in only:
        for tp in (1, 2):
            for users in (1, 16):
                backend = {**b8, "max_batch_size": 16, "tensor_parallel": tp}
                backend["device" if tp == 1 else "devices"] = (
                    "cuda:0" if tp == 1 else ["cuda:0", "cuda:1"]
                )
                rows.append(
                    run(f"8b-tp{tp}-b{users}", backend, closed(users, 8 * users + 16), args.out)
                )
    if 3 in only:
        b70 = {"model": "dummy:llama-3.1-70b", "mode": "static", "max_wait_ms": 20,
               "tensor_parallel": 2, "devices": ["cuda:0", "cuda:1"], "max_batch_size": 8}  # fmt: skip
        for users in (1, 8):
            rows.append(run(f"70b-tp2-b{users}", b70, closed(users, 4 * users + 8), args.out))
    (args.out / "multi_gpu.json").write_text(json.dumps(rows, indent=1))
    print(
        "\n| run | status | out tok/s | TTFT p50 ms | ITL p50 ms | ITL p99 ms | peak MB/GPU | warm-up s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['name']} | {r['status']} | {r['tok_s'] or 0:.0f} | {r['ttft_p50']} | "
            f"{r['itl_p50']} | {r['itl_p99']} | {r['peak_mem_mb']} | {r['warmup_s']} |"
        )


if __name__ == "__main__":
    main()
