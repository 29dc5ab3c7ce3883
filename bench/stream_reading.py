"""Reading a streamed response: through aiohttp, or loadtest's own HTTP/1.1 client read by read or
in batches; the client's CPU per token and the stamps' error, side by side in one process,
against the same fast server.

The server is ``tests/fast_openai_server.py`` as an engine (every ``--step-ms``, one token to
every running stream, from ``--server-cores``), which writes the true gaps it produced. This
process, pinned to ``--client-core``, sends Poisson arrivals at ``--rate`` for ``--seconds`` and
reads each stream with ``Stream.read``, in one of three ways:

- ``aiohttp``: an aiohttp session (uvloop where installed, as loadtest runs), its body taken
  piece by piece as aiohttp's ``iter_chunks`` hands it over, each stamped then;
- ``http1 by read``: ``connection.ConnectionPool``, the stream's coroutine woken at every read
  (``eager``, as a request the plan cancels is read), each event stamped by its read;
- ``http1 in batches``: the same, woken a few times a response (as every other request is).

The modes take turns, ``--rounds`` times each, each round on a fresh server so that every mode
is judged against the true gaps of its own round.

    python bench/stream_reading.py --rate 100 --rounds 2     # this machine: 2 cores

Printed: per round and mode, the event loop thread's CPU per token, ITL p99 against the
server's true gap p99, and each mode's CPU per token over aiohttp's.
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
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.token_capacity import MODEL, Server
from loadtest.backends.openai.stream import Stream
from loadtest.core import loop as event_loop
from loadtest.core.histogram import LatencyHistogram
from loadtest.transport.pool import ConnectionPool
from loadtest.transport.settings import ClientSettings

MODES = ("aiohttp", "http1 by read", "http1 in batches")


async def one_round(url: str, rate: float, seconds: float, output_len: int, mode: str) -> dict:
    body = json.dumps(
        {
            "model": MODEL,
            "prompt": "hello",
            "max_tokens": output_len,
            "stream": True,
            "ignore_eos": True,
        }
    ).encode()
    now = time.monotonic_ns
    if mode == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

        async def read(stream: Stream) -> None:
            async with session.post(url, data=body) as resp:
                pieces = resp.content.iter_chunks().__aiter__()

                async def batch(limit: int) -> bytes:  # the next piece aiohttp has
                    async for piece, _ in pieces:
                        if piece:
                            return piece
                    return b""

                await stream.read(batch, now)

        close = session.close
    else:
        pool = ConnectionPool(
            url, ClientSettings(connect_timeout_s=10.0, read_timeout_ns=3 * 10**10), 0, now
        )

        async def read(stream: Stream) -> None:
            resp = await pool.request("POST", url, body, eager=mode == "http1 by read")
            try:
                await stream.read(resp.batch, now, None, resp.reads)
            finally:
                resp.release()

        close = pool.close
    itl = LatencyHistogram()
    tokens = 0

    async def one() -> None:
        nonlocal tokens
        stream = Stream("completions", output_len, keep_reply=False)
        await read(stream)
        stamps = stream.chunk_ns
        itl.record_gaps_ns(stamps)
        tokens += len(stamps)

    _, cpu = await poisson(rate, seconds, one)
    await close()
    return {
        "tokens": tokens,
        "cpu_us_per_token": cpu / 1e3 / max(1, tokens),
        "itl_p99_ms": itl.summary_ms()["p99"],
        "loop": event_loop.running(),
    }


async def poisson(
    rate: float, seconds: float, one: Callable[[], Awaitable[None]]
) -> tuple[int, int]:
    """``one()`` started at Poisson arrivals (seed 0) for ``seconds``, each run to its end: how
    many, and this thread's CPU ns over them all."""
    rng = random.Random(0)
    tasks = []
    cpu0, start = time.thread_time_ns(), time.monotonic()
    at = start
    while at - start < seconds:
        at += rng.expovariate(rate)
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    return len(tasks), time.thread_time_ns() - cpu0


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
    print("| round | read | tokens | CPU µs/token | ITL p99 ms (true gap p99) | CPU / aiohttp's |")
    print("|---|---|---|---|---|---|")
    for r in range(args.rounds):
        cpu = {}
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            server = Server(args.server_cores, 1, args.step_ms, work, " the")
            try:
                got = event_loop.run(
                    one_round(
                        server.url + "/v1/completions",
                        args.rate,
                        args.seconds,
                        args.output_len,
                        mode,
                    )
                )
            finally:
                true = server.stop()
            cpu[mode] = got["cpu_us_per_token"]
            print(
                f"| {r + 1} | {mode} ({got['loop']}) | {got['tokens']:,} | "
                f"{got['cpu_us_per_token']:.1f} | {got['itl_p99_ms']:.2f} ({true['p99_ms']:.2f}) "
                "| |",
                flush=True,
            )
        print(
            f"| {r + 1} | ratios | | | | "
            + ", ".join(f"{m}: {cpu[m] / cpu['aiohttp']:.2f}" for m in MODES[1:])
            + " |",
            flush=True,
        )


if __name__ == "__main__":
    main()
