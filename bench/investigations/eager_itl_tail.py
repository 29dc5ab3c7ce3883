"""Where the eager decode step's tail comes from: bare generate() calls with chat-like batches,
each step timed, with loadtest's GPU sampler on and off in alternate windows. GPU machine; each
variant in a fresh process.

    PYTHONPATH=. python bench/investigations/eager_itl_tail.py [--model llama-3.2-1b] [--only 1,2]

Each variant runs back-to-back greedy generate() calls for DURATION_S on dummy:<model> in bf16,
eager, with the engine's attention choices: batches of 1-16 rows, lognormal prompts around 256
tokens (left-padded), 32-96 new tokens, from one seed. Beside it, in a process of its own as in a
run (the harness samples, the engine decodes), loadtest's GPU sampler at its default 250 ms
reads every column but those the variant leaves out, for WINDOW_S, then stops for WINDOW_S, and
so on: steps with the sampler on and off come from the same process, interleaved, so neither
side gets a faster or slower process. A step is the time between two tokens handed to the
streamer (generate() copies each step's tokens to the host, so a step ends when the GPU has
finished it). Printed for each side: the step's median and tail, and the stalls (steps over
three times the median) with their step index in their generate() and the time they fell.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_cache import dummy_model, run_variants

DURATION_S, WINDOW_S = 60.0, 5.0
SAMPLER = """
import sys, time
from loadtest.telemetry.gpu_sampler import GpuSampler
until, window, skip = float(sys.argv[1]), float(sys.argv[2]), set(filter(None, sys.argv[3].split(",")))
class Sampler(GpuSampler):
    def _readers(self):
        return tuple((c, r) for c, r in super()._readers() if c not in skip)
while time.monotonic() < until:
    s = Sampler(0.25)
    s.start()
    on = time.monotonic_ns()
    time.sleep(window)
    s.stop()
    print(on, time.monotonic_ns(), flush=True)
    time.sleep(window)
"""
# the sampler's columns left out
VARIANTS = {
    "GPU sampler on and off, every column": "",
    "GPU sampler on and off, no GPM": "gpm",
    "GPU sampler on and off, every column, again": "",
}


def child(name: str, arch: str) -> dict:
    import numpy as np
    import torch

    from loadtest.backends.transformers.attention import pack_decode_attention, register

    register()
    torch.manual_seed(0)
    model = dummy_model(arch)
    pack_decode_attention(model, {"mode": "static", "attn_implementation": None})
    torch.backends.cuda.enable_cudnn_sdp(False)  # the engine's default SDPA choice
    rng = np.random.default_rng(7)

    class Stamps:
        """A streamer that only notes when each token arrives."""

        def __init__(self) -> None:
            self.t: list[int] = []

        def put(self, _value) -> None:
            self.t.append(time.monotonic_ns())

        def end(self) -> None:
            pass

    def batch():
        rows = int(rng.integers(1, 17))
        lengths = np.clip(rng.lognormal(np.log(256), 0.4, rows), 16, 1024).astype(int)
        width = int(lengths.max())
        ids = torch.zeros((rows, width), dtype=torch.long)
        mask = torch.zeros((rows, width), dtype=torch.long)
        for i, n in enumerate(lengths):
            ids[i, width - n :] = torch.randint(1, 1000, (int(n),))
            mask[i, width - n :] = 1
        return ids.cuda(), mask.cuda(), int(rng.integers(32, 97))

    def generate(ids, mask, new: int, streamer=None) -> None:
        with torch.inference_mode():
            model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
                eos_token_id=None,
                streamer=streamer,
            )

    for _ in range(3):  # warm: kernels, cuBLAS handles, the allocator's first blocks
        generate(*batch())
    start = time.monotonic_ns()
    until = start / 1e9 + DURATION_S
    sampler = subprocess.Popen(
        [sys.executable, "-c", SAMPLER, str(until), str(WINDOW_S), VARIANTS[name]],
        stdout=subprocess.PIPE,
        text=True,
    )
    steps: list[tuple[int, float, int]] = []  # (end ns, ms, index in its generate())
    while time.monotonic_ns() < until * 1e9:
        s = Stamps()
        generate(*batch(), streamer=s)
        # t[0]: the prompt handed over; t[1]: the prefill's token; t[k] - t[k-1], k >= 2: steps
        steps += [(s.t[k], (s.t[k] - s.t[k - 1]) / 1e6, k - 1) for k in range(2, len(s.t))]
    out, _ = sampler.communicate(timeout=3 * WINDOW_S + 30)
    windows = [tuple(map(int, line.split())) for line in out.splitlines() if line.strip()]
    first_on = windows[0][0] if windows else None

    def side(t: int) -> str | None:
        if first_on is None or t < first_on:
            return None  # before the sampler's first window: NVML starting up
        return "on" if any(a <= t <= b for a, b in windows) else "off"

    med = float(np.median([ms for _, ms, _ in steps]))
    result: dict = {"windows": len(windows), "overall_p50_ms": round(med, 2)}
    for label in ("off", "on"):
        mine = [(t, ms, k) for t, ms, k in steps if side(t) == label]
        x = np.array([ms for _, ms, _ in mine])
        slow = [(round(ms, 1), k, round((t - start) / 1e9, 2)) for t, ms, k in mine if ms > 3 * med]
        result[label] = {
            "steps": len(mine),
            "p50_ms": round(float(np.median(x)), 2) if len(x) else None,
            "p99_ms": round(float(np.percentile(x, 99)), 2) if len(x) else None,
            "max_ms": round(float(x.max()), 1) if len(x) else None,
            "stalls": slow[:40],
            "n_stalls": len(slow),
        }
    return result


def main() -> None:
    rows = run_variants(child, VARIANTS, __file__)
    if rows is None:  # this was the child
        return
    print(
        "\n| variant | sampler | steps | step p50 ms | p99 ms | max ms | stalls (> 3x the "
        "variant's p50) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, d in rows:
        if d is None:
            print(f"| {name} | failed | | | | | |")
            continue
        for label in ("off", "on"):
            s = d[label]
            print(
                f"| {name} | {label} | {s['steps']} | {s['p50_ms']} | {s['p99_ms']} "
                f"| {s['max_ms']} | {s['n_stalls']} |"
            )
    for name, d in rows:
        for label in ("off", "on"):
            if d and d[label]["stalls"]:
                print(f"\n{name}, sampler {label}: stalls (ms, step index in its generate(), s)")
                print(d[label]["stalls"])


if __name__ == "__main__":
    main()
