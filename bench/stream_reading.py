"""Reading a streamed response read by read, or in batches: the client's CPU per token and the
stamps' error, side by side in one process, against the same fast server.

The server is ``tests/fast_openai_server.py`` as an engine (every ``--step-ms``, one token to
every running stream, from ``--server-cores``), which writes the true gaps it produced. This
process, pinned to ``--client-core``, sends Poisson arrivals at ``--rate`` for ``--seconds``
through loadtest's own HTTP session (``connection.open_session``, read stamps on) and reads each
stream with ``Stream.read``: by read (its coroutine woken for every socket read, as before) or in
batches (``connection.body_batches``: woken a few times a response). The modes alternate,
``--rounds`` times each, on one server; each round gets a fresh server so every mode is judged
against the true gaps of its own round.

    python bench/stream_reading.py --rate 50 --rounds 3      # this machine: 2 cores

Printed: per round and mode, the event loop thread's CPU per token, ITL p99 against the
server's true gap p99, and the ratio of the modes' CPU per token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.token_capacity import MODEL, Server
from loadtest.backends.openai.connection import (
    Wire,
    body_batches,
    open_session,
    read_stamps,
)
from loadtest.backends.openai.stream import Stream
from loadtest.core import loop as event_loop
from loadtest.core.histogram import LatencyHistogram


async def one_round(url: str, rate: float, seconds: float, output_len: int, batched: bool) -> dict:
    spec = SimpleNamespace(
        max_connections=0, verify_tls=False, ca_bundle=None, connect_timeout=10e9, read_timeout=30e9
    )
    session = open_session(spec, {}, ROOT, time.monotonic_ns)
    body = json.dumps(
        {
            "model": MODEL,
            "prompt": "hello",
            "max_tokens": output_len,
            "stream": True,
            "ignore_eos": True,
        }
    )
    itl = LatencyHistogram()
    tokens = 0

    async def one() -> None:
        nonlocal tokens
        async with session.post(url, data=body, trace_request_ctx=Wire()) as resp:
            reads = read_stamps(resp)
            batches = body_batches(resp) if batched else None
            stream = Stream("completions", output_len, keep_reply=False)
            await stream.read(resp.content, time.monotonic_ns, None, reads, batches)
        stamps = [t for t, _ in stream.chunks]
        itl.record_gaps_ns(stamps)
        tokens += len(stamps)

    rng = random.Random(0)
    tasks = []
    cpu0, start = time.thread_time_ns(), time.monotonic()
    at = start
    while at - start < seconds:
        at += rng.expovariate(rate)
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    cpu = time.thread_time_ns() - cpu0
    await session.close()
    return {
        "tokens": tokens,
        "cpu_us_per_token": cpu / 1e3 / max(1, tokens),
        "itl_p99_ms": itl.summary_ms()["p99"],
        "loop": event_loop.running(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=50.0, help="req/s")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--step-ms", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--server-cores", default="0")
    ap.add_argument("--client-core", default="1")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in args.client_core.split(",")})
    work = Path(tempfile.mkdtemp(prefix="stream-reading-"))
    print(
        f"# {args.output_len} tokens a request, {args.step_ms:g} ms apart; Poisson "
        f"{args.rate:g} req/s for {args.seconds:g} s; server on cores {args.server_cores}, "
        f"client on core {args.client_core}"
    )
    print(
        "| round | read | tokens | CPU µs/token | ITL p99 ms (true gap p99) | by read / batches |"
    )
    print("|---|---|---|---|---|---|")
    for r in range(args.rounds):
        cpu = {}
        for batched in (False, True) if r % 2 == 0 else (True, False):
            server = Server(args.server_cores, 1, args.step_ms, work, " the")
            try:
                got = event_loop.run(
                    one_round(
                        server.url + "/v1/completions",
                        args.rate,
                        args.seconds,
                        args.output_len,
                        batched,
                    )
                )
            finally:
                true = server.stop()
            mode = ("in batches" if batched else "by read") + f" ({got['loop']})"
            cpu[batched] = got["cpu_us_per_token"]
            ratio = f"{cpu[False] / cpu[True]:.2f}x" if len(cpu) == 2 else ""
            print(
                f"| {r + 1} | {mode} | {got['tokens']:,} | {got['cpu_us_per_token']:.1f} | "
                f"{got['itl_p99_ms']:.2f} ({true['p99_ms']:.2f}) | {ratio} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
