"""Harness benchmark (no GPU): how fast can loadtest dispatch and record on this machine?

1. Highest Poisson rate at which dispatch lag p99 stays under 1 ms, with the no-op backend and
   the real clock (each rate runs for --seconds; rates double, then bisect).
2. Recording cost per token: Recorder.finish on requests of 256 tokens, µs per token.

    python bench/harness.py            # prints a table; figures go to docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from loadtest.config.loading import parse_scenario
from loadtest.core.clock import MonotonicClock
from loadtest.execution.recorder import Recorder
from loadtest.execution.request import RequestState
from loadtest.session import run_scenario_async
from loadtest.workload.requests import PlannedRequest


def run_rate(rate: float, seconds: float, tmp: str) -> dict:
    text = f"""
name: bench-{rate:g}
backend: {{kind: noop}}
workload: {{input_tokens: 16, output_tokens: 16}}
load: {{arrival: {{kind: poisson, rate: {rate}}}, duration: {seconds}s, warmup: 1s}}
"""
    from pathlib import Path

    loaded = parse_scenario(text, Path(tmp) / "bench.yml", [])
    m = asyncio.run(
        run_scenario_async(loaded, Path(tmp) / f"r{rate:g}", clock=MonotonicClock())
    ).metrics
    return {
        "rate": rate,
        "sent": m["requests"]["sent"],
        "lag_p99_ms": m["latency_ms"]["dispatch_lag"]["p99"],
        "loop_p99_ms": m["harness"]["loop_lag_ms"].get("p99"),
        "achieved": m["throughput"]["requests_per_s"],
    }


def max_rate(seconds: float, tmp: str, start: float = 500.0) -> tuple[float, list[dict]]:
    rows, good, bad, rate = [], None, None, start
    while bad is None and rate <= 64_000:
        row = run_rate(rate, seconds, tmp)
        rows.append(row)
        if row["lag_p99_ms"] < 1.0:
            good, rate = rate, rate * 2
        else:
            bad = rate
    while good is not None and bad is not None and bad / good > 1.1:
        mid = round((good * bad) ** 0.5)
        row = run_rate(mid, seconds, tmp)
        rows.append(row)
        good, bad = (mid, bad) if row["lag_p99_ms"] < 1.0 else (good, mid)
    return good or 0.0, rows


def recording_cost_us_per_token(tokens: int = 256, requests: int = 4000) -> float:
    rec = Recorder(0, 1_000_000_000, 0, None)
    states = []
    for i in range(requests):
        req = PlannedRequest(i, 0, 16, tokens, 0, None, False, True)
        t = i * 1_000_000
        stamps, s = [], t + 5_000_000
        for _ in range(tokens):
            s += random.randint(9_000_000, 11_000_000)
            stamps.append(s)
        states.append(RequestState(req, t, t, t, stamps, stamps[-1], tokens))
    start = time.perf_counter()
    for st in states:
        rec.finish(st)
    rec.close()
    return (time.perf_counter() - start) / (requests * tokens) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        best, rows = max_rate(args.seconds, tmp)
    print(
        f"{'offered req/s':>14} {'sent':>8} {'lag p99 ms':>11} {'loop p99 ms':>12} {'achieved req/s':>15}"
    )
    for r in rows:
        print(
            f"{r['rate']:>14g} {r['sent']:>8} {r['lag_p99_ms']:>11.3f} {r['loop_p99_ms'] or 0:>12.3f} {r['achieved'] or 0:>15.1f}"
        )
    print(f"\nhighest Poisson rate with dispatch lag p99 < 1 ms: {best:g} req/s")
    print(f"recording cost: {recording_cost_us_per_token():.2f} µs per token (256-token requests)")


if __name__ == "__main__":
    main()
