"""Regression-gate calibration (no GPU): how often does A/A fail, how often does a 15% slowdown?

A is the simulated server of tests/unit/analysis/test_regression.py (4 slots, utilisation ~0.6, Poisson, 40 s
runs); B is the same server 15% slower. Every run is a fresh schedule seed on the virtual clock,
so the figures are exact and repeatable. Pairs are disjoint (no run is in two pairs, so the
pairs are independent trials): A/A, A/B, and the same with --replicates runs a side. Compared
with the gate's defaults (7 headline metrics, 5% minimum effect, 99% simultaneous confidence)
and with the noisy subset only (the sim's ITL is exact, so any change in it is certain).

    python bench/gate_calibration.py --pairs 100   # prints a table; figures go to docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtest.analysis import regression
from loadtest.results.model import RunMetrics
from tests.conftest import run_virtual_scenario


def run(where: Path, data: dict) -> RunMetrics:
    return RunMetrics.model_validate(run_virtual_scenario(where, data))


from tests.unit.analysis.test_regression import NOISY, gate_verdict, scenario


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--pairs",
        type=int,
        default=100,
        help="A/A pairs (2 x this many A runs; half as many B runs)",
    )
    ap.add_argument("--replicates", type=int, default=3, help="runs a side for the replicated rows")
    args = ap.parse_args()
    n, k = args.pairs, args.replicates
    with tempfile.TemporaryDirectory() as tmp:
        a = [run(Path(tmp) / f"a{s}", scenario(10_000 + s)) for s in range(2 * n)]
        b = [run(Path(tmp) / f"b{s}", scenario(20_000 + s, 1.15)) for s in range(n)]
    print(
        f"{'metrics':10} {'comparison':22} {'pairs':>6} {'FAIL':>6} {'INCONCLUSIVE':>13} {'PASS':>6}",
        flush=True,
    )
    for label, metrics in (("default", regression.DEFAULT_METRICS), ("noisy", NOISY)):
        rows = {
            "A/A, 1 vs 1": [([a[2 * i]], [a[2 * i + 1]]) for i in range(n)],
            "A/B (+15%), 1 vs 1": [([a[i]], [b[i]]) for i in range(n)],
            f"A/A, {k} vs {k}": [
                (a[i : i + k], a[i + k : i + 2 * k]) for i in range(0, 2 * n - 2 * k + 1, 2 * k)
            ],
            f"A/B (+15%), {k} vs {k}": [
                (a[i : i + k], b[i : i + k]) for i in range(0, n - k + 1, k)
            ],
        }
        for name, pairs in rows.items():
            c = Counter(
                gate_verdict(regression.compare(x, y, metrics, seed=n))
                for n, (x, y) in enumerate(pairs)
            )
            print(
                f"{label:10} {name:22} {len(pairs):>6} {c['FAIL']:>6} {c['INCONCLUSIVE']:>13} {c['PASS']:>6}",
                flush=True,
            )


if __name__ == "__main__":
    main()
