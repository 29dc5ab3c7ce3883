"""Where does the harness's per-step cost come from? (issue 3, compiled static decode; GPU machine)

    PYTHONPATH=. python bench/investigations/overhead_split.py --batch-sizes 8,32 --rounds 12

One process, one model, compiled once per batch size (static cache + torch.compile, as
``compile: true``), then in rounds with the order rotated, one ``generate()`` of 128 in / 128 out
per variant:

    bare           generate() as a user calls it, no streamer
    stamp          + a streamer that only takes each step's tokens (host copy) and stamps them
    engine         the engine worker's own generate path and outbox, into a real pipe that a
                   draining process reads: stamps after generate()'s own per-step sync (the
                   default stamp source), messages made and written by the outbox's thread
    engine-streamer  the same with the streamer as the stamp source (the fallback)
    bare-eos       bare with an EOS id set (one the model never produces: still 128 tokens)
    engine-eos     engine on such requests: the per-row loop also reads every step's tokens
    engine+nvml    engine while another process samples NVML (GPM included) every 250 ms, as
                   the parent does with telemetry on
    bare+nvml      bare, with that sampler running

Prints tok/s per variant (median over rounds), the median of the per-round ratios to bare
(``*-eos`` to bare-eos) with a
95% bootstrap interval, and the time each streamer's ``put`` took per step on this host.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import threading
import time

MODEL = "dummy:llama-3.2-1b"
N_IN = N_OUT = 128


def _drain(conn) -> None:
    while conn.recv() != "end":
        pass


def _sample(stop, interval: float) -> None:
    from loadtest.telemetry.gpu_sampler import GpuSampler

    s = GpuSampler(interval)
    s.start()
    stop.wait()
    s.stop()
    print(
        f"  (sampler: {len(s.rows)} rows, {s.errors} errors, unavailable={s.unavailable}, "
        f"gpm={'yes' if s.devices and s.devices[0].gpm_samples else 'no'})",
        flush=True,
    )


PUT_S: dict[str, list] = {}
CURRENT = [""]  # the variant running now


def timed(cls, name: str):
    """Wraps ``cls.<name>`` to add its wall time to PUT_S["variant name"] = [seconds, calls]."""
    inner = getattr(cls, name)

    def wrapper(self, *args, **kwargs):
        t = time.perf_counter()
        result = inner(
            self, *args, **kwargs
        )  # _drain returns the steps' messages: they must still be sent
        acc = PUT_S.setdefault(f"{CURRENT[0]} {name}", [0.0, 0])
        acc[0] += time.perf_counter() - t
        acc[1] += 1
        return result

    setattr(cls, name, wrapper)


class StampOnly:
    """The least a per-token stamp needs: the step's tokens on the host, then the clock."""

    def __init__(self) -> None:
        self.first, self.stamps = True, []

    def put(self, value) -> None:
        if self.first:
            self.first = False
            return
        value.tolist()
        self.stamps.append(time.monotonic_ns())

    def end(self) -> None:
        pass


def _median_ci(xs: list, n: int = 2000) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median (rounds are independent pairs)."""
    import random

    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", default="8,32")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default="bare,stamp,engine,engine-streamer,bare-eos,engine-eos")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    import torch
    import transformers

    from loadtest.backends.transformers import stamping as engine_worker
    from loadtest.backends.transformers.engine import Engine
    from loadtest.backends.transformers.loading import load_model
    from loadtest.backends.transformers.outbox import Outbox
    from loadtest.backends.transformers.stamping import AFTER_SYNC, STREAMER
    from loadtest.config.transformers_spec import TransformersSpec
    from loadtest.core.heap import settle_heap

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, deferred stop check: "
        f"{hasattr(__import__('transformers.generation.utils', fromlist=['x']), 'DeferredStopCheck')}",
        flush=True,
    )
    ctx = mp.get_context("spawn")
    spec = TransformersSpec(
        **{
            "model": args.model,
            "device": args.device,
            "dtype": "bfloat16",
            "seed": 0,
            "attn_implementation": None,
            "trust_remote_code": False,
            "mode": "static",
            "compile": True,
            "max_batch_size": 64,
            "max_wait_ms": 0,
        }
    )
    loaded = load_model(spec, ".")
    model, device = loaded[0], loaded[1]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rd, wr = ctx.Pipe(duplex=False)
    drainer = ctx.Process(target=_drain, args=(rd,), daemon=True)
    drainer.start()
    outbox = Outbox(wr)
    engine = Engine(spec, ".", outbox, loaded=loaded)
    print(f"stamp source: {engine.stamp_source}", flush=True)
    idle_r, _idle_w = ctx.Pipe(duplex=False)  # the worker's pipe-reader thread, blocked in recv()
    threading.Thread(target=lambda: idle_r.poll(None), daemon=True).start()
    stop = ctx.Event()
    sampler = None

    def nvml(on: bool) -> None:
        nonlocal sampler
        if on and sampler is None:
            stop.clear()
            sampler = ctx.Process(target=_sample, args=(stop, 0.25), daemon=True)
            sampler.start()
            time.sleep(1.5)  # NVML init and GPM set-up done before timing
        elif not on and sampler is not None:
            stop.set()
            sampler.join()
            sampler = None

    rid = [0]

    def run(variant: str, bs: int) -> float:
        ids = torch.full((bs, N_IN), 65, dtype=torch.long, device=device)
        kw = dict(
            max_new_tokens=N_OUT,
            min_new_tokens=N_OUT,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
            cache_implementation="static",
        )
        never = model.config.vocab_size + 7  # an EOS id no step can produce
        if variant == "bare-eos":
            kw.update(min_new_tokens=None, eos_token_id=never)
        CURRENT[0] = variant
        nvml(variant.endswith("+nvml"))
        sync()
        t = time.perf_counter()
        with torch.inference_mode():
            if variant.startswith("engine"):
                batch = []
                for _ in range(bs):
                    rid[0] += 1
                    eos = never if variant == "engine-eos" else None
                    batch.append(("req", rid[0], [65] * N_IN, N_OUT, eos is None, eos))
                engine.stamp_source = STREAMER if variant == "engine-streamer" else AFTER_SYNC
                assert engine._generate(batch, set(), outbox, set()) == 0, "one stamp per token"
            else:
                extra = {}
                if variant == "stamp":
                    extra["streamer"] = StampOnly()
                model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kw, **extra)
        sync()
        dt = time.perf_counter() - t
        # The writer's last period of messages, outside any timed call: it must not land in the
        # next variant's measurement (in a run it overlaps the next batch).
        outbox.flush()
        return bs * N_OUT / dt

    sys.setswitchinterval(0.0005)  # as the engine worker
    variants = args.variants.split(",")
    timed(StampOnly, "put")
    timed(engine_worker.StepStreamer, "put")
    timed(engine_worker.StepStreamer, "step")
    timed(
        engine_worker.StepStreamer, "_drain"
    )  # on the outbox thread: the steps since its last period
    timed(
        engine_worker.AfterSyncStamps, "copy_tokens"
    )  # the step's tokens to pinned memory, before the stop check
    table = []
    for bs in [int(x) for x in args.batch_sizes.split(",")]:
        t = time.monotonic()
        for v in (
            "bare",
            "engine",
        ):  # compile this batch shape (both paths share the compiled model)
            run(v, bs)
        print(f"batch {bs}: compiled in {time.monotonic() - t:.0f} s", flush=True)
        settle_heap()  # as the engine worker after its warm-up
        got = {v: [] for v in variants}
        PUT_S.clear()
        rounds = args.rounds
        for r in range(rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            order.sort(
                key=lambda v: v.endswith("+nvml")
            )  # sampler runs grouped: one start/stop per round
            for v in order:
                got[v].append(run(v, bs))
            nvml(False)
            if r < 3 or r == args.rounds - 1:
                print(
                    f"  round {r}: " + ", ".join(f"{v} {got[v][-1]:.0f}" for v in variants),
                    flush=True,
                )
        steps = {
            v: rounds * N_OUT for v in variants
        }  # _drain runs once per writer period: per step
        print(
            "  per step (put, step, copy_tokens: generate thread; _drain: outbox thread): "
            + ", ".join(
                f"{k} {1e6 * a / (steps[k.split()[0]] if k.endswith('_drain') else n):.1f} us"
                for k, (a, n) in PUT_S.items()
            ),
            flush=True,
        )
        for v in variants:
            base = "bare-eos" if v.endswith("-eos") and "bare-eos" in got else "bare"
            ratios = [x / b for x, b in zip(got[v], got[base])]
            table.append(
                (bs, v, statistics.median(got[v]), statistics.median(ratios), *_median_ci(ratios))
            )
    print(
        "\n| batch | variant | tok/s (median) | ratio to bare (-eos: to bare-eos): median of per-round ratios [95% CI] | ms/step |"
    )
    print("|---|---|---|---|---|")
    for bs, v, tps, med, lo, hi in table:
        print(
            f"| {bs} | {v} | {tps:.1f} | {med:.3f} [{lo:.3f}, {hi:.3f}] | {bs / tps * 1000:.3f} |"
        )
    outbox.send("end")
    outbox.close()


if __name__ == "__main__":
    main()
