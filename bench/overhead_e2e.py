"""Harness overhead end to end, side by side in one run (issue 3; GPU machine, or --device cpu).

    PYTHONPATH=. python bench/overhead_e2e.py --batch-sizes 1,8,32 --rounds 20 [--compile]

One loadtest engine worker (the real backend: spawned process, pipes, batcher, stamps, outbox,
the parent's reader thread and event loop), one loaded model and its compiled graphs. In rounds,
with the order alternating, at each batch size B (static mode, 128 in / 128 out, fixed length):

    bare     the worker runs generate() as a user's own loop would on the same model, the same
             settings and a batch of the same shape, inputs already on the device: no streamer,
             no stamps, no messages (``bench/engine_reference.py``, run in the worker
             through its hook). Its time is the call's, to the
             device being idle after it.
    loadtest B requests submitted through the backend at once, as a burst arrival does: the
             batcher forms one batch, each token is stamped and sent back, the parent turns
             the messages into events. Its time runs from the parent's first send to the last
             request's ``Finished`` stamp, so it also pays the request's trip to the worker,
             the batcher and the padded inputs' copy to the device — all of the harness.

Output tokens per second of each; the median of the per-round ratios loadtest / bare with a 95%
bootstrap interval (rounds are independent pairs; adjacent in time, so a slow host moment hits
both sides of a pair). Both sides share the process, the model and the compiled graph: what
differs is only the harness. Run ``python bench/investigations/overhead_split.py`` to see where a gap comes from.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent / "investigations"))
from overhead_split import _median_ci

N_IN = N_OUT = 128


async def _one(backend, req, prompt_ids) -> tuple[int, int]:
    """Consumes one request's events as the runner does; (tokens, the Finished stamp)."""
    from loadtest.core.events import Failed, Finished, Tokens

    n = 0
    async for ev in backend.submit(req, prompt_ids):
        if type(ev) is Tokens:
            n += len(ev.t_ns)
        elif type(ev) is Finished:
            return n, ev.t_ns
        elif type(ev) is Failed:
            raise RuntimeError(f"request {req.index} failed: {ev}")
    raise RuntimeError(f"request {req.index} ended without Finished")


async def main_async(args) -> list:
    from loadtest.backends.transformers.backend import TransformersBackend
    from loadtest.config.transformers_spec import TransformersSpec
    from loadtest.core.clock import MonotonicClock

    sizes = [int(x) for x in args.batch_sizes.split(",")]
    spec = TransformersSpec(
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        mode="static",
        compile=args.compile,
        pad_decode=False if args.unpadded else None,
        max_batch_size=max(sizes),
        max_wait_ms=60_000,
    )
    backend = TransformersBackend(spec, MonotonicClock())
    info = await backend.start()
    print(f"{info.name}; stamp source: {info.details.get('stamp_source')}", flush=True)
    plan = SimpleNamespace(  # what prepare() reads of a plan
        requests=[SimpleNamespace(input_tokens=N_IN, output_tokens=N_OUT)],
        longest_prompt=lambda: N_IN,
    )
    t = time.monotonic()
    warm = await backend.prepare(plan)  # as a run does: every batch size 1..max, before t0
    print(
        f"warm-up {warm['warmup_s']} s (sizes 1..{max(sizes)}; {time.monotonic() - t:.0f} s)",
        flush=True,
    )
    prompt = [65] * N_IN
    next_index = [0]

    async def bare(bs: int) -> float:
        (seconds,) = await backend.call_in_engine(
            "engine_reference:bare_generate", bs, N_IN, N_OUT, 1
        )
        return bs * N_OUT / seconds

    async def harness(bs: int) -> float:
        reqs = []
        for _ in range(bs):
            next_index[0] += 1
            reqs.append(SimpleNamespace(index=next_index[0], output_tokens=N_OUT, ignore_eos=True))
        t0 = time.monotonic_ns()
        got = await asyncio.gather(*(_one(backend, r, prompt) for r in reqs))
        tokens = sum(n for n, _ in got)
        assert tokens == bs * N_OUT, f"{tokens} token stamps for {bs} x {N_OUT} tokens"
        return tokens / ((max(t for _, t in got) - t0) / 1e9)

    table, rounds = [], {}
    try:
        for bs in sizes:
            await backend.reconfigure(spec.model_copy(update={"max_batch_size": bs}))
            await bare(bs), await harness(bs)  # first use of this size since warm-up: untimed
            got = {"bare": [], "loadtest": []}
            for r in range(args.rounds):
                order = ("bare", "loadtest") if r % 2 == 0 else ("loadtest", "bare")
                for side in order:
                    got[side].append(await (bare(bs) if side == "bare" else harness(bs)))
                if r < 2 or r == args.rounds - 1:
                    print(
                        f"  bs {bs} round {r}: bare {got['bare'][-1]:.1f}, loadtest {got['loadtest'][-1]:.1f} tok/s",
                        flush=True,
                    )
            ratios = [o / b for o, b in zip(got["loadtest"], got["bare"])]
            lo, hi = _median_ci(ratios)
            table.append(
                (
                    bs,
                    statistics.median(got["bare"]),
                    statistics.median(got["loadtest"]),
                    statistics.median(ratios),
                    lo,
                    hi,
                    sum(r >= 0.98 for r in ratios) / len(ratios),
                )
            )
            rounds[bs] = got
            facts = await backend.point_facts()
            print(
                f"  bs {bs}: worker gc {facts.get('gc_pauses')}, stamp mismatches {facts.get('stamp_mismatches')}",
                flush=True,
            )
    finally:
        await backend.stop()
    if args.json:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "rounds": rounds}, indent=1)
        )
    return table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", default="1,8,32")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--model", default="dummy:llama-3.2-1b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument(
        "--compile", action="store_true", help="static cache + torch.compile, as compile: true"
    )
    ap.add_argument(
        "--unpadded",
        action="store_true",
        help="with --compile: decode steps at the batch's rows (pad_decode: false)",
    )
    ap.add_argument("--json", type=Path, help="write every round's figures here")
    args = ap.parse_args()
    table = asyncio.run(main_async(args))
    print(
        f"\n{args.model} {args.dtype} on {args.device}, static mode{' + compile' if args.compile else ''}, "
        f"{N_IN} in / {N_OUT} out, {args.rounds} rounds\n"
    )
    print(
        "| batch | bare tok/s (median) | loadtest tok/s (median) | loadtest / bare: median of per-round ratios "
        "[95% CI] | rounds >= 0.98 |\n|---|---|---|---|---|"
    )
    for bs, b, o, r, lo, hi, share in table:
        print(f"| {bs} | {b:.1f} | {o:.1f} | {r:.3f} [{lo:.3f}, {hi:.3f}] | {share:.0%} |")


if __name__ == "__main__":
    main()
