"""What the live metrics endpoint and OpenTelemetry cost a run, side by side in one call (no
GPU).

    PYTHONPATH=. python bench/live_metrics.py --rate 1000 --seconds 8 --rounds 3

The noop backend at a Poisson rate (64 tokens an answer), in rounds, the order rotating each
round, five ways: ``off`` (no endpoint), ``on`` (an endpoint nobody scrapes), ``scraped-1s``
and ``scraped-0.25s`` (scraped that often from another thread: 15 and 60 times as often as
Prometheus's default 15 s, so a cost shows), and ``otel`` (``outputs.otel``: every request a
span, exported each second, and the live figures pushed every 5 s, to an OTLP receiver in a
process of its own). Each run's dispatch lag p99 and event-loop lag p99 (metrics.json), and
the process's CPU time over the run per output token (the exporters' threads included).
Medians over the rounds, and each mode's ratio to ``off``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

MODES = ("off", "on", "scraped-1s", "scraped-0.25s", "50-scrapers-1s", "otel")
EVERY_S = {"scraped-1s": 1.0, "scraped-0.25s": 0.25, "50-scrapers-1s": 1.0}
SCRAPERS = {"50-scrapers-1s": 50}  # scrapers at once (1 otherwise)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _receiver(tmp: Path) -> subprocess.Popen:
    """An OTLP receiver in a process of its own (its decoding is not the run's CPU), named to
    the runs by OTEL_EXPORTER_OTLP_ENDPOINT."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.otlp_receiver", "--port", str(port),
         "--tally", str(tmp / "otlp.json")],
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    return proc


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one(mode: str, rate: float, seconds: float, tmp: Path, i: int) -> dict:
    from loadtest.config.loading import parse_scenario
    from loadtest.core.clock import MonotonicClock
    from loadtest.session import run_scenario_async

    port = _free_port()
    outputs = {"off": "", "otel": "otel: true, "}.get(
        mode, f"metrics_port: {port}, metrics_linger: 0s, "
    )
    text = f"""
name: live-metrics-{mode}
backend: {{kind: noop}}
workload: {{input_tokens: 16, output_tokens: 64}}
load: {{arrival: {{kind: poisson, rate: {rate}}}, duration: {seconds}s, warmup: 1s}}
outputs: {{{outputs}interval: 1s}}
"""
    loaded = parse_scenario(text, tmp / f"{mode}.yml", [])
    stop, scrapes = threading.Event(), [0]

    def scrape() -> None:
        while not stop.wait(EVERY_S[mode]):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    r.read()
                scrapes[0] += 1
            except OSError:
                pass  # not up yet, or gone

    scrapers = [
        threading.Thread(target=scrape, daemon=True)
        for _ in range(SCRAPERS.get(mode, 1) if mode in EVERY_S else 0)
    ]
    for scraper in scrapers:
        scraper.start()
    cpu = _cpu_s()
    m = asyncio.run(run_scenario_async(loaded, tmp / f"{mode}-{i}", clock=MonotonicClock())).metrics
    cpu = _cpu_s() - cpu
    stop.set()
    for scraper in scrapers:
        scraper.join(5)
    tokens = m["requests"]["output_tokens"] + 64 * m["requests"]["warmup"]
    return {
        "mode": mode,
        "lag_p99_ms": m["latency_ms"]["dispatch_lag"]["p99"],
        "loop_p99_ms": m["harness"]["loop_lag_ms"].get("p99"),
        "cpu_us_per_token": 1e6 * cpu / max(1, tokens),
        "scrapes": scrapes[0],
        "valid": m["validity"]["valid"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        receiver = _receiver(Path(tmp))
        for r in range(args.rounds):
            order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
            for mode in order:
                row = one(mode, args.rate, args.seconds, Path(tmp), r)
                print(row, flush=True)
                rows.append(row)
        receiver.terminate()
        receiver.wait(10)
    med = {
        mode: {
            k: statistics.median(x[k] for x in rows if x["mode"] == mode)
            for k in ("lag_p99_ms", "loop_p99_ms", "cpu_us_per_token", "scrapes")
        }
        for mode in MODES
    }
    print(f"\nnoop, Poisson {args.rate:g} req/s x 64 tokens, {args.seconds:g} s, "
          f"{args.rounds} rounds; medians (ratio to off)")  # fmt: skip
    print("| mode | dispatch lag p99 ms | loop lag p99 ms | CPU µs / token | scrapes |")
    print("|---|---|---|---|---|")
    base = med["off"]
    for mode in MODES:
        m = med[mode]
        print(
            f"| {mode} | {m['lag_p99_ms']:.3f} ({m['lag_p99_ms'] / base['lag_p99_ms']:.2f}x) | "
            f"{m['loop_p99_ms']:.3f} ({m['loop_p99_ms'] / base['loop_p99_ms']:.2f}x) | "
            f"{m['cpu_us_per_token']:.3f} ({m['cpu_us_per_token'] / base['cpu_us_per_token']:.2f}x)"
            f" | {m['scrapes']:.0f} |"
        )


if __name__ == "__main__":
    t = time.monotonic()
    main()
    print(f"({time.monotonic() - t:.0f} s)")
