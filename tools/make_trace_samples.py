"""Write the small trace samples in scenarios/data/ (seeded; written for the tests and the
shipped scenarios, in the public formats: Mooncake's JSONL, BurstGPT's and Azure's CSV).

    python tools/make_trace_samples.py

The Mooncake sample has prefix structure: each request starts with one of two system prompts
(a block each), half of them go on with one of ten shared documents (a block each), and each
ends with a block of its own, cut short; lengths fit a 2048-token model.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "scenarios" / "data"
COUNT, RATE = 120, 2.0  # requests, a second


def times(rng: random.Random) -> list[float]:
    t, out = 0.0, []
    for _ in range(COUNT):
        out.append(t)
        t += rng.expovariate(RATE)
    return out


def mooncake(rng: random.Random) -> str:
    lines = []
    for i, t in enumerate(times(rng)):
        blocks = [rng.choices((0, 1), (0.6, 0.4))[0]]
        if rng.random() < 0.5:
            blocks.append(100 + rng.randrange(10))
        blocks.append(1000 + i)
        n_in = 512 * len(blocks) - rng.randrange(1, 480)
        row = {
            "timestamp": round(t * 1000),
            "input_length": n_in,
            "output_length": rng.randint(8, 64),
            "hash_ids": blocks,
        }
        lines.append(json.dumps(row))
    return "\n".join(lines) + "\n"


def burstgpt(rng: random.Random) -> str:
    rows = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    for t in times(rng):
        n_in, n_out = rng.randint(16, 600), rng.choice([0] + [rng.randint(8, 200)] * 19)
        model = rng.choice(("ChatGPT", "GPT-4"))
        rows.append(f"{t:.0f},{model},{n_in},{n_out},{n_in + n_out},Conversation log")
    return "\n".join(rows) + "\n"


def azure(rng: random.Random) -> str:
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    start = datetime(2023, 11, 16, 18, 15, 46)
    for t in times(rng):
        stamp = start + timedelta(seconds=t)
        rows.append(
            f"{stamp:%Y-%m-%d %H:%M:%S}.{stamp.microsecond:06d}0,"
            f"{rng.randint(16, 1200)},{rng.randint(4, 160)}"
        )
    return "\n".join(rows) + "\n"


def main() -> None:
    for name, make, seed in (
        ("mooncake-sample.jsonl", mooncake, 1),
        ("burstgpt-sample.csv", burstgpt, 2),
        ("azure-sample.csv", azure, 3),
    ):
        (DATA / name).write_text(make(random.Random(seed)))
        print(DATA / name)


if __name__ == "__main__":
    main()
