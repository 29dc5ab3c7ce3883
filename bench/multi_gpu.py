"""Several GPUs: replicas and tensor parallelism, one table per call (docs/benchmarks.md).

    PYTHONPATH=. python bench/multi_gpu.py --out /tmp/multi --only replicas,tp8b   # two GPUs
    PYTHONPATH=. python bench/multi_gpu.py --out /tmp/multi --only tp70b,four      # four GPUs

Sections (each row one `loadtest` run through the Python API, dummy weights, bf16, static
batches, 128 tokens in and 128 out, closed loops; a failed row is printed and the rest go on):

- ``replicas``: dummy:llama-3.1-8b at saturation (64 users, batches of up to 32): one GPU
  alone, then two replicas with each engine pinned to a CPU block of its own (the default) and
  with placement left to the OS. Output tok/s against the lone GPU's, and each replica's mean
  decode step against the lone engine's.
- ``tp8b``: the 8B compiled, TP=1 against TP=2 at batch 1 and 16 (ITL p50 ratio), decoded by
  the pipelined loop (the default), and at batch 1 by generate()'s loop beside it.
- ``replicas-compiled``: the ``replicas`` comparison with compiled decode steps (one GPU alone,
  then two replicas).
- ``tp70b``: dummy:llama-3.1-70b compiled, TP=2 (and TP=4 with four GPUs) at batch 1 and 8:
  TTFT, ITL and the HBM floor (one rank's bytes a decode step at the GPU's peak bandwidth).
- ``tp8b-kernels``: where a decode step's GPU time goes, TP=1 against TP=2 (one-shot and NCCL
  all-reduces), compiled, batch 1: a profiler window over four requests (508 decode steps),
  its kernels summed by kind (all-reduces, attention, matmuls, the rest) a step.
  ``tp8b-autotune``: TP=1 and TP=2 so, with inductor's ``max_autotune``.
- ``four`` (four GPUs): ``tp4-8b``, the 8B compiled at TP=1 and TP=4 (batch 1, profiled, and
  TP=4 at batch 16), and
  ``replicas-of-tp2``, two replicas of TP=2, compiled, at saturation (against
  ``replicas-compiled``'s lone GPU).

A call of ten minutes holds a few sections; ``--table`` prints the whole table from the
``multi_gpu.json`` of several calls on one machine:

    python bench/multi_gpu.py --table call1/multi_gpu.json call2/multi_gpu.json
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

FIXED = {"input_tokens": 128, "output_tokens": 128}
B8 = {"model": "dummy:llama-3.1-8b", "mode": "static", "max_wait_ms": 20}
B70 = {"model": "dummy:llama-3.1-70b", "mode": "static", "max_wait_ms": 20}


def closed(users: int, requests: int) -> dict:
    return {
        "arrival": {"kind": "concurrency", "users": users},
        "requests": requests,
        "warmup_requests": users,
        "drain_timeout": "300s",
    }


def gpus(first: int, n: int) -> list[str]:
    return [f"cuda:{first + i}" for i in range(n)]


def run(name: str, backend: dict, load: dict, out: Path, profile: dict | None = None) -> dict:
    import yaml

    from loadtest.config.loading import parse_scenario
    from loadtest.session import run_scenario

    text = yaml.safe_dump(
        {
            "name": name,
            "backend": {"kind": "transformers", "start_timeout": "20m", **backend},
            "workload": FIXED,
            "load": load,
            **({"profile": profile} if profile else {}),
        }
    )
    t = time.monotonic()
    try:
        m = run_scenario(parse_scenario(text, out / f"{name}.yml", []), out / name).metrics
    except Exception as exc:  # a row that failed is a row: the rest go on
        row = {"name": name, "status": "error", "failure": f"{type(exc).__name__}: {exc}"[:300]}
        return _keep(row, out)
    lat, b = m["latency_ms"], m["backend"]
    decode = (m.get("roofline") or {}).get("decode") or {}
    row = {
        "name": name,
        "status": m["status"],
        "tok_s": m["throughput"]["output_tokens_per_s"],
        "ttft_p50": lat["ttft"].get("p50"),
        "itl_p50": lat["itl"].get("p50"),
        "itl_p99": lat["itl"].get("p99"),
        "step_ms": decode.get("step_ms"),
        "hbm_floor_ms": decode.get("floor_ms"),
        "mbu": decode.get("mbu"),
        "replica_steps_ms": [r.get("decode_step_ms") for r in b.get("replicas") or []],
        "cpus": [r.get("cpus") for r in b.get("replicas") or []] or [b.get("cpus")],
        "warmup_s": b.get("warmup_s"),
        "peak_mem_mb": m.get("peak_mem_mb"),
        "decode_loop": b.get("decode_loop"),
        "all_reduce": (b.get("tensor_parallel") or {}).get("all_reduce"),
        "cudagraph_skips": b.get("cudagraph_skips"),
        "gpus": [_gpu_line(d) for d in (m.get("gpu") or {}).get("devices") or []],
        "seconds": round(time.monotonic() - t),
        "failure": (m.get("harness") or {}).get("failure") or b.get("error"),
        "invalid_because": (m.get("validity") or {}).get("reasons"),
    }
    if profile and profile.get("requests"):
        first, last = profile["requests"]
        steps = (last - first + 1) * (FIXED["output_tokens"] - 1)
        row["kernels_per_step"] = kernels_per_step(m.get("profile") or {}, steps)
    return _keep(row, out)


# A kernel's kind, by the first pattern its name matches (cuBLAS/cuBLASLt/CUTLASS matmuls,
# NCCL and symmetric-memory collectives, SDPA's attention kernels); "other" is the rest
# (inductor's fused pointwise and reductions, copies, the cache update).
KINDS = [
    ("allreduce", re.compile(r"nccl|all_?reduce|allgather|all_gather|multimem|one_shot|two_shot",
                             re.I)),
    ("attention", re.compile(r"flash|fmha|attention|attn|sdpa", re.I)),
    ("matmul", re.compile(r"gemm|gemv|nvjet|xmma|cutlass|splitk|cublas|matmul|_mm_", re.I)),
]  # fmt: skip


def kernels_per_step(profile: dict, steps: int) -> dict:
    """The window's kernel time by kind, ms a decode step (its four prefills included, ~2%):
    the top 50 kernels classified by name, the rest of the summary's total as "other"."""
    kernels, summary = profile.get("kernels") or [], profile.get("kernel_summary") or {}
    if not kernels or not steps:
        return {"why_none": profile.get("profiler") or "no kernels in the window"}
    by: dict[str, float] = {"matmul": 0.0, "allreduce": 0.0, "attention": 0.0, "other": 0.0}
    for k in kernels:
        kind = next((kind for kind, rx in KINDS if rx.search(k["name"])), "other")
        by[kind] += k["cuda_time_us"]
    by["other"] += summary.get("cuda_time_us", 0.0) - sum(k["cuda_time_us"] for k in kernels)
    out = {kind: round(us / steps / 1000, 3) for kind, us in by.items()}
    out["total"] = round(summary.get("cuda_time_us", 0.0) / steps / 1000, 3)
    out["launches"] = round(summary.get("launches", 0) / steps, 1)
    out["top"] = [
        [k["name"][:60], round(k["cuda_time_us"] / steps, 1), round(k["cuda_calls"] / steps, 1)]
        for k in kernels[:12]
    ]
    return out


def tp8b_kernels(out: Path, autotune: bool = False) -> list[dict]:
    """TP=1 and TP=2 (one-shot, NCCL) at batch 1, compiled, each with a profiler window; with
    ``autotune``, TP=1 and TP=2 with inductor's max_autotune (its own matmul kernels)."""
    rows = []
    runs = ((1, None), (2, None)) if autotune else ((1, None), (2, None), (2, "nccl"))
    for tp, all_reduce in runs:
        backend = {**B8, "max_batch_size": 1, "compile": True, "tensor_parallel": tp,
                   "devices": gpus(0, tp)}  # fmt: skip
        if all_reduce:
            backend["all_reduce"] = all_reduce
        if autotune:
            backend["compile_options"] = {"max_autotune": True}
        suffix = ("-" + all_reduce if all_reduce else "") + ("-autotune" if autotune else "")
        name = f"8b-tp{tp}-b1-compiled-kernels{suffix}"
        profile = {"requests": [8, 11], "exclude_from_stats": True}
        rows.append(run(name, backend, closed(1, 24), out, profile))
    return rows


def _keep(row: dict, out: Path) -> dict:
    """Print the row and add it to ``out/multi_gpu.json`` at once (atomically), so a call
    stopped by its time limit keeps every row measured before."""
    print(json.dumps(row), flush=True)
    path = out / "multi_gpu.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([*rows, row], indent=1))
    tmp.replace(path)
    return row


def _gpu_line(d: dict) -> dict:
    """One GPU over the window: kernel-active share, SM clock, power, throttle reasons."""

    def mean(key: str):
        return (d.get(key) or {}).get("mean")

    return {
        "index": d.get("index"),
        "util_pct": mean("utilization_gpu_pct"),
        "sm_mhz": mean("clocks_sm_mhz"),
        "power_w": mean("power_w"),
        "throttle": d.get("throttle_reasons_seen"),
    }


def replicas(out: Path) -> list[dict]:
    sat = closed(64, 384)
    base = {**B8, "max_batch_size": 32}
    return [
        run("8b-1gpu-b32", {**base, "device": "cuda:0"}, sat, out),
        run("8b-2replicas-b32", {**base, "devices": gpus(0, 2)}, sat, out),
        run("8b-2replicas-b32-unpinned", {**base, "devices": gpus(0, 2), "cpu_affinity": "none"},
            sat, out),
    ]  # fmt: skip


def replicas_compiled(out: Path) -> list[dict]:
    sat = closed(64, 384)
    base = {**B8, "max_batch_size": 32, "compile": True}
    return [
        run("8b-1gpu-b32-compiled", {**base, "device": "cuda:0"}, sat, out),
        run("8b-2replicas-b32-compiled", {**base, "devices": gpus(0, 2)}, sat, out),
    ]


# tp8b's runs: (decode loop, tensor_parallel, users, all_reduce, name suffix)
TP8B = [
    ("pipelined", 1, 1, None, ""),
    ("pipelined", 2, 1, None, ""),
    ("pipelined", 1, 16, None, ""),
    ("pipelined", 2, 16, None, ""),
    ("pipelined", 2, 1, "nccl", "-nccl"),
    ("generate", 1, 1, None, "-generate"),
    ("generate", 2, 1, "nccl", "-generate"),
]


def tp8b(out: Path, generate: bool = True) -> list[dict]:
    rows = []
    for loop, tp, users, all_reduce, suffix in TP8B:
        if loop == "generate" and not generate:
            continue
        backend = {**B8, "max_batch_size": 16, "compile": True, "tensor_parallel": tp,
                   "devices": gpus(0, tp), "decode_loop": loop}  # fmt: skip
        if all_reduce:
            backend["all_reduce"] = all_reduce
        name = f"8b-tp{tp}-b{users}-compiled{suffix}"
        rows.append(run(name, backend, closed(users, 4 * users + 16), out))
    return rows


def tp70b(out: Path, count: int, sizes: list[int], users_list: list[int]) -> list[dict]:
    rows = []
    for tp in [t for t in sizes if t <= count]:
        for users in users_list:
            backend = {**B70, "max_batch_size": 8, "compile": True, "tensor_parallel": tp,
                       "devices": gpus(0, tp)}  # fmt: skip
            rows.append(
                run(f"70b-tp{tp}-b{users}-compiled", backend, closed(users, 2 * users + 8), out)
            )
    return rows


def tp4_8b(out: Path) -> list[dict]:
    """The 8B at TP=1 and TP=4, batch 1 with a profiler window (as ``tp8b-kernels``), and
    TP=4 at batch 16, on one machine."""
    rows = []
    for tp, users in ((1, 1), (4, 1), (4, 16)):
        backend = {**B8, "max_batch_size": users, "compile": True, "tensor_parallel": tp,
                   "devices": gpus(0, tp)}  # fmt: skip
        if users == 1:
            profile = {"requests": [8, 11], "exclude_from_stats": True}
            rows.append(run(f"8b-tp{tp}-b1-compiled-kernels", backend, closed(1, 24), out, profile))
        else:
            rows.append(run(f"8b-tp{tp}-b{users}-compiled", backend, closed(users, 80), out))
    return rows


def replicas_of_tp2(out: Path) -> list[dict]:
    two_by_two = {**B8, "max_batch_size": 32, "compile": True, "tensor_parallel": 2,
                  "devices": gpus(0, 4)}  # fmt: skip
    return [run("8b-2replicas-of-tp2-b32-compiled", two_by_two, closed(64, 384), out)]


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--table", type=Path, nargs="+", help="print the table of these calls' rows")
    ap.add_argument("--only", default="replicas,tp8b,tp70b,four")
    ap.add_argument("--tp70b-sizes", default="2,4", help="tensor_parallel sizes of the 70B")
    ap.add_argument("--tp70b-users", default="1,8", help="closed-loop users of the 70B runs")
    ap.add_argument(
        "--no-generate", action="store_true", help="tp8b: leave out generate()'s loop rows"
    )
    args = ap.parse_args()
    if args.table:  # no GPU needed: the rows of earlier calls, one table
        rows = [r for path in args.table for r in json.loads(path.read_text())]
        table(rows, device=None)
        return
    if args.out is None:
        ap.error("--out is required to measure")
    args.out.mkdir(parents=True, exist_ok=True)
    count = torch.cuda.device_count()
    if count < 2:
        raise SystemExit(f"needs two GPUs; this machine has {count}")
    sections = {
        "replicas": lambda: replicas(args.out),
        "replicas-compiled": lambda: replicas_compiled(args.out),
        "tp8b": lambda: tp8b(args.out, generate=not args.no_generate),
        "tp8b-kernels": lambda: tp8b_kernels(args.out),
        "tp8b-autotune": lambda: tp8b_kernels(args.out, autotune=True),
        "tp70b": lambda: tp70b(
            args.out,
            count,
            [int(x) for x in args.tp70b_sizes.split(",")],
            [int(x) for x in args.tp70b_users.split(",")],
        ),
        "tp4-8b": lambda: tp4_8b(args.out) if count >= 4 else [],
        "replicas-of-tp2": lambda: replicas_of_tp2(args.out) if count >= 4 else [],
    }
    wanted = args.only.replace("four", "tp4-8b,replicas-of-tp2").split(",")
    unknown = [w for w in wanted if w not in sections]
    if unknown:
        ap.error(f"unknown sections {unknown}; known: {', '.join(sections)}, four")
    rows = [row for name in wanted for row in sections[name]()]
    table(rows)


def table(rows: list[dict], device: str | None = "") -> None:
    if device is not None:
        print(f"\n{device or torch_device_line()}")
    print("| run | status | out tok/s | TTFT p50 ms | ITL p50 ms | ITL p99 ms | step ms | "
          "HBM floor ms | replica steps ms | CPUs | peak MB/GPU |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["status"] == "error":
            print(f"| {r['name']} | error: {r['failure']} |")
            continue
        print(
            f"| {r['name']} | {r['status']} | {r['tok_s'] or 0:.0f} | {r['ttft_p50']} | "
            f"{r['itl_p50']} | {r['itl_p99']} | {r['step_ms']} | {r['hbm_floor_ms']} | "
            f"{r['replica_steps_ms']} | {r['cpus']} | {r['peak_mem_mb']} |"
        )
    by = {r["name"]: r for r in rows if r["status"] != "error"}
    for a, b in [
        ("8b-2replicas-b32", "8b-1gpu-b32"),
        ("8b-2replicas-b32-unpinned", "8b-1gpu-b32"),
        ("8b-2replicas-of-tp2-b32-compiled", "8b-1gpu-b32-compiled"),
        ("8b-2replicas-b32-compiled", "8b-1gpu-b32-compiled"),
    ]:
        if a in by and b in by and by[b]["tok_s"]:
            print(f"{a} / {b}: output tok/s x{by[a]['tok_s'] / by[b]['tok_s']:.2f}")
            steps, lone = [x for x in by[a]["replica_steps_ms"] if x], by[b]["step_ms"]
            if steps and lone:
                print(f"  slowest replica's decode step / lone engine's: x{max(steps) / lone:.3f}")
    for r in rows:
        if r["status"] != "error" and r["step_ms"] and r["hbm_floor_ms"]:
            print(f"{r['name']}: decode step / HBM floor x{r['step_ms'] / r['hbm_floor_ms']:.2f}")
    for r in rows:
        if r.get("kernels_per_step"):
            print(f"{r['name']}: kernel ms a step {json.dumps(r['kernels_per_step'])}")
    for users, two_suffix, one_suffix in (
        (1, "", ""),
        (16, "", ""),
        (1, "-nccl", ""),
        (1, "-generate", "-generate"),
    ):
        one = by.get(f"8b-tp1-b{users}-compiled{one_suffix}")
        two = by.get(f"8b-tp2-b{users}-compiled{two_suffix}")
        if one and two and one["itl_p50"]:
            print(
                f"batch {users}, TP2{two_suffix or ' pipelined, one-shot'} / "
                f"TP1{one_suffix or ' pipelined'}: ITL p50 x{two['itl_p50'] / one['itl_p50']:.2f}"
            )


def torch_device_line() -> str:
    import torch

    names = {torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}
    return f"{torch.cuda.device_count()} x {', '.join(sorted(names))}; torch {torch.__version__}"


if __name__ == "__main__":
    main()
