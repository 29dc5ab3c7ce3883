"""Recording a stream's inter-token gaps, side by side in one process: the way loadtest does it
(``core.histogram._add_gaps``: each gap's bucket found at once, the counts added into hdrh's
counts array) against hdrh's public API (``record_value`` once per distinct bucket, with its
count; and once per gap).

    PYTHONPATH=. python bench/histogram_writes.py [--streams 300] [--repeats 5]

Streams of 64, 256 and 1,024 tokens, their gaps drawn three ways: a GPU's decode step (8 ms,
sd 0.4 ms), a CPU server's (exponential, mean 30 ms), and a fast simulated server (0.3 ms, sd
0.15 ms, one gap in ten 50 µs). Printed: µs a stream for each way (the best of ``--repeats``)
and each public way's time over loadtest's. Each way's histogram is checked equal to the
others' before its time is printed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadtest.core import histogram
from loadtest.core.histogram import LatencyHistogram

GAPS: dict[str, Callable[[random.Random], float]] = {
    "GPU decode": lambda r: r.gauss(8e6, 4e5),
    "CPU server": lambda r: r.expovariate(1 / 3e7),
    "fast sim": lambda r: r.gauss(3e5, 1.5e5) if r.random() < 0.9 else 5e4,
}


def at_once(h: LatencyHistogram, stamps: list[int]) -> None:
    h.record_gaps_ns(stamps)


def per_bucket(h: LatencyHistogram, stamps: list[int]) -> None:
    """hdrh's ``record_value(value, count)`` for each distinct bucket the gaps fall in."""
    us = np.diff(np.asarray(stamps, dtype=np.int64)) // 1000
    index = histogram._lowest_values(h.hdr).searchsorted(us, side="right") - 1
    lowest, counts = np.unique(histogram._lowest_values(h.hdr)[index], return_counts=True)
    for v, c in zip(lowest.tolist(), counts.tolist()):
        h.hdr.record_value(v, c)


def per_gap(h: LatencyHistogram, stamps: list[int]) -> None:
    record = h.hdr.record_value
    for a, b in zip(stamps, stamps[1:]):
        record((b - a) // 1000)


WAYS = {"loadtest (at once)": at_once, "hdrh per bucket": per_bucket, "hdrh per gap": per_gap}


def streams(rng: random.Random, gap: Callable[[random.Random], float], n: int, k: int) -> list:
    out = []
    for _ in range(k):
        t, stamps = 0, [0]
        for _ in range(n):
            t = max(t + int(gap(rng)), t)
            stamps.append(t)
        out.append(stamps)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    assert histogram.FAST, "this hdrh is not laid out as loadtest reads it: nothing to compare"
    rng = random.Random(1)
    print(f"{'gaps':12} {'tokens':>6}  " + "  ".join(f"{w:>20}" for w in WAYS) + "   ratios")
    for name, gap in GAPS.items():
        for n in (64, 256, 1024):
            ss = streams(rng, gap, n, args.streams)
            us, encoded = {}, set()
            for way, record in WAYS.items():
                best = float("inf")
                for _ in range(args.repeats):
                    h = LatencyHistogram()
                    t0 = time.perf_counter()
                    for s in ss:
                        record(h, s)
                    best = min(best, time.perf_counter() - t0)
                us[way] = best / len(ss) * 1e6
                encoded.add(h.encode())
            assert len(encoded) == 1, "the ways recorded different histograms"
            base = us["loadtest (at once)"]
            ratios = " ".join(f"{us[w] / base:.1f}x" for w in list(WAYS)[1:])
            cells = "  ".join(f"{us[w]:>17.1f} µs" for w in WAYS)
            print(f"{name:12} {n:>6}  {cells}   {ratios}")


if __name__ == "__main__":
    main()
