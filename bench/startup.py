"""How long the CLI takes to answer, side by side with the bare interpreter in one run: each
command run ``--repeats`` times in a fresh process, the best time printed with its ratio to
``python -c pass`` (the floor no command can beat). The goal: ``--version`` and ``validate``
within 0.5 s on an idle core of a 2-core machine.

    python bench/startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "loadtest --version": [sys.executable, "-m", "loadtest", "--version"],
    "loadtest -h": [sys.executable, "-m", "loadtest", "-h"],
    "loadtest validate chat.yml": [
        sys.executable,
        "-m",
        "loadtest",
        "validate",
        str(ROOT / "scenarios" / "chat.yml"),
    ],  # fmt: skip
    "loadtest plan poisson-sla.yml": [
        sys.executable,
        "-m",
        "loadtest",
        "plan",
        str(ROOT / "scenarios" / "poisson-sla.yml"),
    ],  # fmt: skip
}


def best_of(command: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    floor = None
    for name, command in COMMANDS.items():
        t = best_of(command, args.repeats)
        floor = floor or t
        print(f"{name:32} {t:6.3f} s   {t / floor:5.1f}x python -c pass")


if __name__ == "__main__":
    main()
