"""Per-call CPU cost, on this host, of ways to get one decode step's tokens to the host before
generate()'s stop check (bench for AfterSyncStamps.copy_tokens; GPU machine).

    PYTHONPATH=. python bench/investigations/copy_cost.py
"""

from __future__ import annotations

import time

import numpy as np
import torch


def per_call_us(fn, n: int = 3000) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / n * 1e6


def main() -> None:
    dev = torch.device("cuda")
    for bs in (1, 32):
        tokens = torch.randint(0, 1000, (bs,), device=dev)
        unfinished = torch.ones(bs, dtype=torch.long, device=dev)
        cached = torch.empty((128, bs), dtype=torch.long, pin_memory=True)
        host = np.zeros((128, bs), dtype=np.int64)
        torch.cuda.cudart().cudaHostRegister(host.ctypes.data, host.nbytes, 0)
        registered = torch.from_numpy(host)
        k = [0]

        def row(buf):
            k[0] = (k[0] + 1) % 128
            return buf[k[0]]

        variants = {
            "launch: x.add_(1) (one small kernel)": lambda: unfinished.add_(0),
            "stop check as generate(): bool(u.max() == 0)": lambda: bool(unfinished.max() == 0),
            "row.copy_(tokens, non_blocking) caching-allocator pinned": lambda: row(cached).copy_(
                tokens, non_blocking=True
            ),
            "row.copy_(tokens, non_blocking) cudaHostRegister'd": lambda: row(registered).copy_(
                tokens, non_blocking=True
            ),
            "index only: buf[k]": lambda: row(cached),
            "tokens.to(cpu, non_blocking) (allocates)": lambda: tokens.to("cpu", non_blocking=True),
            "cat + .cpu() (flag and tokens, one copy)": lambda: torch.cat(
                (tokens, (unfinished.max() == 0).long()[None])
            ).cpu(),
        }
        for name, fn in variants.items():
            print(f"bs {bs:2d} | {name:62s} | {per_call_us(fn):7.1f} us", flush=True)


if __name__ == "__main__":
    main()
