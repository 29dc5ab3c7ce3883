"""Why is a replica's eager decode step slower than a lone engine's? No harness: bare decode
steps of dummy:llama-3.1-8b at batch 32 (bf16, eager, a sync a step as generate() makes), one
process a GPU, measured alone and two at once under each CPU placement.

    PYTHONPATH=. python bench/investigations/replica_contention.py [--steps 64]

Prints the host's CPU topology (which CPUs are SMT siblings, NUMA nodes) and, per placement,
each process's median decode step in ms. Placements: ``lone`` (cuda:0, CPU 1), ``pair-near``
(the second and third CPUs this process may use), ``pair-far`` (the second and one half-way
along), ``pair-siblings`` (the second and its SMT sibling, if the host shows one), ``pair-os`` (no pinning, torch's default threads).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path


def topology() -> dict:
    siblings = set()
    for f in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/thread_siblings_list"):
        siblings.add(f.read_text().strip())
    out = {"cpus": os.cpu_count(), "smt_sibling_sets": sorted(siblings)[:8]}
    try:
        out["lscpu"] = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        pass
    return out


ALL = None  # a placement that leaves the process to the OS with torch's default threads


def worker(gpu: int, cases: list, steps: int, barrier, out) -> None:
    """Load once; for each case, pin as it says (or idle), decode ``steps`` steps in step with
    the other process, report the median step."""
    import torch
    import transformers

    from loadtest.backends.transformers.loading import dummy_config

    everything = sorted(os.sched_getaffinity(0))
    default_threads = torch.get_num_threads()
    device = torch.device(f"cuda:{gpu}")
    torch.cuda.set_device(device)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(
            dummy_config("llama-3.1-8b"), dtype=torch.bfloat16
        ).eval()
    ids = torch.randint(0, 128000, (32, 128), device=device)

    def steps_ms() -> float:
        times = []
        with torch.inference_mode():
            cache = transformers.DynamicCache()
            nxt = model(ids, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            for _ in range(steps):
                t = time.perf_counter()
                nxt = model(nxt, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
                nxt.tolist()  # the step's tokens on the host, as a stamped generate() has them
                times.append(time.perf_counter() - t)
        return round(1e3 * statistics.median(times), 3)

    steps_ms()  # warm
    for name, placement in cases:
        cpus = placement[gpu] if gpu < len(placement) else "idle"
        barrier.wait(timeout=600)
        if cpus == "idle":
            barrier.wait(timeout=600)
            continue
        os.sched_setaffinity(0, everything if cpus is ALL else cpus)
        torch.set_num_threads(default_threads if cpus is ALL else len(cpus))
        got = steps_ms()
        out.put((name, gpu, got, cpus if cpus is not ALL else "os"))
        barrier.wait(timeout=600)


def main() -> None:
    import multiprocessing as mp

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=64)
    args = ap.parse_args()
    topo = topology()
    print(json.dumps({k: v for k, v in topo.items() if k != "lscpu"}))
    print(topo.get("lscpu", ""))
    allowed = sorted(os.sched_getaffinity(0))  # a taskset may give this bench part of a host
    first, half = allowed[1], allowed[len(allowed) // 2 + 1]
    cases = [
        ("lone", [[first]]),
        ("pair-near", [[first], [allowed[2]]]),
        ("pair-far", [[first], [half]]),
        ("pair-os", [ALL, ALL]),
        ("lone-again", [[first]]),
    ]
    path = Path(f"/sys/devices/system/cpu/cpu{first}/topology/thread_siblings_list")
    if path.exists():
        listed = path.read_text().strip().replace("-", ",").split(",")
        others = [int(c) for c in listed if int(c) != first and int(c) in allowed]
        if others:
            cases.insert(3, ("pair-siblings", [[first], [others[0]]]))
    ctx = mp.get_context("spawn")
    q, barrier = ctx.Queue(), ctx.Barrier(2)
    procs = [ctx.Process(target=worker, args=(g, cases, args.steps, barrier, q)) for g in (0, 1)]
    for p in procs:
        p.start()
    expected = sum(len(p) for _, p in cases)
    rows = [q.get(timeout=900) for _ in range(expected)]
    for p in procs:
        p.join(60)
    for name, _ in cases:
        print(name, [(g, ms, c) for n_, g, ms, c in rows if n_ == name], flush=True)


if __name__ == "__main__":
    main()
