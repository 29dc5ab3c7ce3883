"""Dispatch precision side by side: loadtest's open-loop runner (no-op backend, real clock) against
a bare asyncio dispatcher on the same Poisson schedule, alternating in one process, so the
machine's noise cancels in the ratio.

The bare dispatcher is the floor for one asyncio process: absolute deadlines, ``asyncio.sleep``
to within 1.5 ms of each, then ``sleep(0)`` until it, then a task per request that stamps the
time it starts running and finishes at once. Dispatch lag, for both, is when the request's own
code starts running minus its intended time.

    PYTHONPATH=. python bench/dispatch.py [--rates 500,2000] [--seconds 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from loadtest.config.loading import parse_scenario
from loadtest.core.clock import MonotonicClock
from loadtest.core.histogram import LatencyHistogram
from loadtest.session import run_scenario_async

SPIN_NS = 1_500_000


def schedule(rate: float, seconds: float, seed: int = 1) -> list[int]:
    """Poisson arrival offsets (ns) over ``seconds``."""
    rng, t, out = random.Random(seed), 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return out
        out.append(int(t * 1e9))


async def bare(offsets: list[int], warmup_s: float) -> float:
    """The bare dispatcher's lag p99 (ms) over the requests after ``warmup_s``."""
    hist = LatencyHistogram()
    t0 = time.monotonic_ns() + 10_000_000
    tasks = set()

    async def request(intended: int) -> None:
        lag = time.monotonic_ns() - intended
        if intended - t0 >= warmup_s * 1e9:
            hist.record_ns(lag)

    for off in offsets:
        at = t0 + off
        remaining = at - time.monotonic_ns()
        if remaining > SPIN_NS:
            await asyncio.sleep((remaining - SPIN_NS) / 1e9)
        while time.monotonic_ns() < at:
            await asyncio.sleep(0)
        task = asyncio.create_task(request(at))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    return hist.percentile_ms(99)


def loadtest_lag(rate: float, seconds: float, warmup_s: float, tmp: str, k: int) -> float:
    text = f"""
name: dispatch-{rate:g}
seeds: {{schedule: 1}}
backend: {{kind: noop}}
workload: {{input_tokens: 16, output_tokens: 16}}
load: {{arrival: {{kind: poisson, rate: {rate}}}, duration: {seconds}s, warmup: {warmup_s}s}}
"""
    loaded = parse_scenario(text, Path(tmp) / "bench.yml", [])
    m = asyncio.run(
        run_scenario_async(loaded, Path(tmp) / f"r{rate:g}-{k}", clock=MonotonicClock())
    ).metrics
    return m["latency_ms"]["dispatch_lag"]["p99"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="500,2000")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"{'req/s':>7} {'round':>5} {'bare p99 ms':>12} {'loadtest p99 ms':>16} {'ratio':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for rate in (float(r) for r in args.rates.split(",")):
            offsets = schedule(rate, args.warmup + args.seconds)
            ratios = []
            for k in range(args.rounds):  # alternate, so both see the same minute
                b = asyncio.run(bare(offsets, args.warmup))
                lt = loadtest_lag(rate, args.seconds, args.warmup, tmp, k)
                ratios.append(lt / b if b else float("inf"))
                print(f"{rate:>7g} {k + 1:>5} {b:>12.3f} {lt:>16.3f} {ratios[-1]:>7.2f}")
            print(f"{rate:>7g} median ratio loadtest / bare: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
