"""The floor under a streamed token's client cost: a client that only stamps its socket reads.

A protocol that keeps each read's bytes and time and does nothing else (no framing, no SSE, no
JSON), against ``loadtest``'s own client (``http1`` in batches, ``Stream.read``), side by side in
one process, on the same fast server as ``bench/stream_reading.py``. What is left between them
is loadtest's work a token; the floor itself is the event loop's and the kernel's (a wake-up,
a ``recv`` and a Python call a read).

Printed for each: CPU a token, split into the kernel's (system time) and the process's own
(user time); ITL p99 against the server's true gap p99 (the floor gives each event its read's
stamp, as loadtest does); and the TCP segments the host sent a token beyond the token's own,
read from ``/proc/net/snmp`` (the client's ACKs, on an otherwise quiet host). Past the rate at
which the floor itself fails the 0.5 ms bound, no client of this shape can read on time.

    python bench/investigations/read_floor.py --rates 200,300,400 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.stream_reading import one_round, poisson
from bench.token_capacity import MODEL, Server
from loadtest.core import loop as event_loop
from loadtest.core.histogram import LatencyHistogram


class Stamping(asyncio.Protocol):
    """Every read kept with its time; the body ends with the chunked terminator."""

    def __init__(self) -> None:
        self.reads: list[tuple[int, bytes]] = []
        self.done: asyncio.Future | None = None

    def data_received(self, data: bytes) -> None:
        self.reads.append((time.monotonic_ns(), data))
        if data.endswith(b"0\r\n\r\n") and self.done is not None and not self.done.done():
            self.done.set_result(None)


async def floor_round(port: int, rate: float, seconds: float, output_len: int) -> dict:
    loop = asyncio.get_running_loop()
    body = json.dumps(
        {"model": MODEL, "prompt": "hello", "max_tokens": output_len, "stream": True,
         "ignore_eos": True}
    ).encode()  # fmt: skip
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    idle: list[tuple[asyncio.Transport, Stamping]] = []
    reads = 0
    itl = LatencyHistogram()

    async def one() -> None:
        nonlocal reads
        transport, protocol = (
            idle.pop() if idle else await loop.create_connection(Stamping, "127.0.0.1", port)
        )
        protocol.reads, protocol.done = [], loop.create_future()
        transport.write(request)
        await protocol.done
        reads += len(protocol.reads)
        # every event keeps its read's stamp; the first event's read is the head's or after it
        stamps = [t for t, data in protocol.reads for _ in range(data.count(b"data: {"))]
        itl.record_gaps_ns(stamps)
        idle.append((transport, protocol))

    sent, cpu = await poisson(rate, seconds, one)
    for transport, _ in idle:
        transport.close()
    tokens = sent * output_len
    return {
        "tokens": tokens,
        "reads": reads,
        "cpu_us_per_token": cpu / 1e3 / tokens,
        "itl_p99_ms": itl.summary_ms()["p99"],
        "loop": event_loop.running(),
    }


def tcp_out_segments() -> int:
    """Segments this host's TCP has sent (its network namespace's count)."""
    lines = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines()]
    head, values = [pair for pair in zip(lines, lines[1:]) if pair[0][0] == "Tcp:"][0]
    return int(values[head.index("OutSegs")])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="200", help="req/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--server-cores", default="0")
    ap.add_argument("--server-processes", type=int, default=1)
    ap.add_argument("--client-core", default="1")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in args.client_core.split(",")})
    work = Path(tempfile.mkdtemp(prefix="read-floor-"))
    print(f"# Poisson arrivals for {args.seconds:g} s, {args.output_len} tokens each")
    print(
        "| req/s | round | client | reads a token | CPU µs/token | of it the kernel's | "
        "ITL p99 ms (true gap p99) | segments sent a token beyond its own |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for rate in [float(r) for r in args.rates.split(",")]:
        for r in range(args.rounds):
            for mode in ("floor", "loadtest") if r % 2 == 0 else ("loadtest", "floor"):
                print(row(rate, r, mode, args, work), flush=True)


def row(rate: float, r: int, mode: str, args: argparse.Namespace, work: Path) -> str:
    server = Server(args.server_cores, args.server_processes, 1.0, work, " the")
    try:
        use0 = resource.getrusage(resource.RUSAGE_THREAD)
        segments0 = tcp_out_segments()
        if mode == "floor":
            got = event_loop.run(floor_round(server.port, rate, args.seconds, args.output_len))
            per_read = f"{got['reads'] / got['tokens']:.2f}"
        else:
            got = event_loop.run(
                one_round(
                    server.url + "/v1/completions",
                    rate,
                    args.seconds,
                    args.output_len,
                    "http1 in batches",
                )
            )
            per_read = "-"
        use = resource.getrusage(resource.RUSAGE_THREAD)
        system, user = use.ru_stime - use0.ru_stime, use.ru_utime - use0.ru_utime
        extra = (tcp_out_segments() - segments0) / got["tokens"] - 1
    finally:
        true = server.stop()
    return (
        f"| {rate:g} | {r + 1} | {mode} ({got['loop']}) | {per_read} | "
        f"{got['cpu_us_per_token']:.1f} | {got['cpu_us_per_token'] * system / (system + user):.1f} | "
        f"{got['itl_p99_ms']:.2f} ({true['p99_ms']:.2f}) | {extra:.2f} |"
    )


if __name__ == "__main__":
    main()
