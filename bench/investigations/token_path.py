"""A streamed token's cost in loadtest's own code alone, without the kernel or the loop's waits:
recorded response bytes fed to ``http1.Connection.data_received`` read by read, then read by
``Stream.read`` in batches, as a stream of the fast server's shape and one of vLLM's
(completions chunks with ``created``, ``logprobs``, ``stop_reason`` and ``usage``).

Each tree given (a checkout's root; this one by default) is measured in a process of its own,
taking turns, and the second's cost is printed over the first's:

    python bench/investigations/token_path.py --trees /tmp/before,.   # git worktree add /tmp/before <commit>
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

TOKENS = 256
CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def recorded(vllm: bool) -> list[bytes]:
    """A response's reads: its head, then a token's event each, then the end."""
    if vllm:
        event = {
            "id": "cmpl-1", "object": "text_completion", "created": 1764000000,
            "model": "m", "usage": None,
            "choices": [{"index": 0, "text": " the", "logprobs": None, "finish_reason": None,
                         "stop_reason": None}],
        }  # fmt: skip
    else:
        event = {"id": "cmpl-1", "object": "text_completion", "model": "m",
                 "choices": [{"index": 0, "text": " the"}]}  # fmt: skip
    last = {
        "id": "cmpl-1", "object": "text_completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "length", "text": ""}],
        "usage": {"prompt_tokens": 16, "completion_tokens": TOKENS, "total_tokens": 16 + TOKENS},
    }  # fmt: skip
    token = chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
    end = chunk(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n") + b"0\r\n\r\n"
    return [CHUNKED_HEAD, *[token] * TOKENS, end]


class Pool:
    """What a connection asks of its pool: a clock that moves 1 µs a call."""

    def __init__(self) -> None:
        self.t = 0

    def now(self) -> int:
        self.t += 1000
        return self.t

    def released(self, conn, keep) -> None:
        pass

    def lost(self, conn) -> None:
        pass


class Transport:
    def write(self, data) -> None:
        pass

    def get_extra_info(self, name):
        return None

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


async def measure(reps: int, vllm: bool) -> tuple[float, float]:
    from loadtest.backends.openai.stream import Stream
    from loadtest.transport import http1

    reads, pool = recorded(vllm), Pool()
    received = streamed = 0
    for _ in range(reps):
        conn = http1.Connection(pool)
        conn.connection_made(Transport())
        conn._reset(http1.BATCH_BYTES)
        conn.state = http1._HEAD
        t0 = time.perf_counter_ns()
        for r in reads:
            conn.data_received(r)
        t1 = time.perf_counter_ns()
        resp = http1.Response(conn)
        stream = Stream("completions", TOKENS, keep_reply=False)
        ended = await stream.read(resp.batch, pool.now, None, resp.reads)
        t2 = time.perf_counter_ns()
        assert ended is None and len(stream.chunks) >= TOKENS, ended
        received += t1 - t0
        streamed += t2 - t1
    per = reps * TOKENS * 1e3
    return received / per, streamed / per


def one_tree(reps: int) -> None:
    """In a tree's own process: µs a token for each shape, as JSON."""
    from loadtest.core import loop as event_loop

    out = {}
    for shape in ("fast server", "vLLM"):
        event_loop.run(measure(reps // 10, shape == "vLLM"))  # warm
        out[shape] = event_loop.run(measure(reps, shape == "vLLM"))
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", default=".", help="checkout roots, comma-separated")
    ap.add_argument("--reps", type=int, default=300, help="responses a measurement")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--in-tree", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.in_tree:
        one_tree(args.reps)
        return
    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    print(f"# {TOKENS} tokens a response, {args.reps} responses a measurement; µs a token")
    print("| round | tree | shape | data_received | Stream.read | both |")
    print("|---|---|---|---|---|---|")
    got: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for tree in trees if r % 2 == 0 else trees[::-1]:
            argv = [sys.executable, __file__, "--in-tree", "--reps", str(args.reps)]
            run = subprocess.run(
                argv, cwd=tree, env={"PYTHONPATH": tree, "PATH": "/usr/bin:/bin"},
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            for shape, (received, streamed) in json.loads(run.stdout).items():
                got.setdefault(f"{tree}|{shape}", []).append(received + streamed)
                print(
                    f"| {r + 1} | {tree} | {shape} | {received:.2f} | {streamed:.2f} | "
                    f"{received + streamed:.2f} |",
                    flush=True,
                )
    if len(trees) > 1:
        for shape in ("fast server", "vLLM"):
            first = sum(got[f"{trees[0]}|{shape}"]) / args.rounds
            last = sum(got[f"{trees[-1]}|{shape}"]) / args.rounds
            print(f"{shape}: {trees[-1]} costs {last / first:.2f}x {trees[0]}'s")


if __name__ == "__main__":
    main()
