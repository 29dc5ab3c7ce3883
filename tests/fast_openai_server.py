"""A fast OpenAI-compatible streaming endpoint for benchmarking the client (not a test double:
the HTTP backend's tests run against the real ``transformers serve``).

Lists one model at /v1/models; answers /v1/completions and /v1/chat/completions at once: as
many SSE chunks of one token each as ``max_completion_tokens`` (else ``max_tokens``) asks, a
final chunk with ``usage``, then ``[DONE]``, with an optional delay between tokens.

    python tests/fast_openai_server.py --port 8123 [--itl-ms 0] [--ttft-ms 0] [--processes 1]
    python tests/fast_openai_server.py --port 8123 --step-ms 1 --stats-dir DIR

``--step-ms`` streams as a batching engine does: every step, one token to every running stream
at once (one timer for all of them, so the server stays cheap however many streams run), and
with ``--stats-dir`` each process writes the inter-token gaps it actually produced (a stream's
consecutive writes) to ``DIR/<pid>.json`` as it exits: the true gap a client's ITL is judged
against.

``--processes N`` serves from N processes on one port (SO_REUSEPORT), so that a client with many
workers measures itself, not this server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

from aiohttp import web


def closing(rid: str, kind: str, model: str, chat: bool, n: int) -> bytes:
    """A stream's end: a chunk with the finish reason and ``usage`` (no text), then [DONE]."""
    last = {
        "id": rid,
        "object": kind,
        "model": model,
        "choices": [
            {"index": 0, "finish_reason": "length", **({"delta": {}} if chat else {"text": ""})}
        ],
        "usage": {"prompt_tokens": 16, "completion_tokens": n, "total_tokens": 16 + n},
    }
    return b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n"


async def handle(request: web.Request) -> web.StreamResponse:
    # when the request reached the handler, on CLOCK_MONOTONIC: the response id carries it, so a
    # client's per-request export shows how late each request arrived (bench/send_lateness.py)
    arrived = f"arrived-{time.monotonic_ns()}"
    body = await request.json()
    chat = request.path.endswith("/chat/completions")
    n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
    if request.app["engine"] is not None:
        return await request.app["engine"].stream(request, body, chat, n, arrived)
    itl = request.app["itl_s"]
    if request.app["ttft_s"]:  # a set time to the first token: a known-truth server
        await asyncio.sleep(request.app["ttft_s"])
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    request.app["state"]["running"] += 1
    request.app["state"]["ttft_sum"] += 0.001
    request.app["state"]["ttft_count"] += 1
    kind = "chat.completion.chunk" if chat else "text_completion"
    state = request.app["state"]
    state["served"] += 1
    answer_as = request.app["answer_as"]
    model = answer_as[0] if answer_as and state["served"] > answer_as[1] else body["model"]
    # a known-truth divergence: with more than --diverge-above in flight, the answer's third
    # token on is another word (counted: the truth a test compares the client's figure with)
    above = request.app["diverge_above"]
    diverges = above is not None and state["running"] > above  # this one counted in it
    state["diverged"] += diverges
    for _i in range(n):
        word = " alt" if diverges and _i >= 2 else " tok"
        choice = {"index": 0, "delta": {"content": word}} if chat else {"index": 0, "text": word}
        await resp.write(
            b"data: "
            + json.dumps(
                {"id": arrived, "object": kind, "model": model, "choices": [choice]}
            ).encode()
            + b"\n\n"
        )
        if itl:
            await asyncio.sleep(itl)
    await resp.write(closing(arrived, kind, model, chat, n))
    request.app["state"]["running"] -= 1
    await resp.write_eof()
    return resp


class Engine:
    """Every ``step_s``, one token to each running stream, as one batched decode step does."""

    GAPS_KEPT = 1_000_000  # gaps a process keeps for its percentiles (every one, up to this)

    def __init__(self, step_s: float, text: str) -> None:
        self.step_s, self.text = step_s, text
        self.running: list[list] = []  # [response, tokens left, chunk bytes, last write ns]
        self.gaps: list[int] = []
        self.task: asyncio.Task | None = None
        self.arrivals: list[int] = []  # every stream's arrival (a bench finds its run's among them)
        self.last_ns = 0  # the last token's write
        self.tokens = 0

    async def stream(self, request, body, chat: bool, n: int, rid: str) -> web.StreamResponse:
        kind = "chat.completion.chunk" if chat else "text_completion"
        text = self.text
        choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
        chunk = json.dumps({"id": rid, "object": kind, "model": body["model"], "choices": [choice]})
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        self.arrivals.append(time.monotonic_ns())
        done = asyncio.get_running_loop().create_future()
        self.running.append([resp, n, b"data: " + chunk.encode() + b"\n\n", None, done])
        if self.task is None:
            self.task = asyncio.create_task(self._steps())
        await done
        await resp.write(closing(rid, kind, body["model"], chat, n))
        await resp.write_eof()
        return resp

    async def _steps(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            batch, self.running, still = self.running, [], []
            for s in batch:
                # each write's own time: a step's writes take a while, in an order that
                # changes as streams come and go, so the step's start is not each one's
                now = time.monotonic_ns()
                try:
                    await s[0].write(s[2])
                except ConnectionError:
                    s[4].cancel()
                    continue
                if s[3] is not None and len(self.gaps) < self.GAPS_KEPT:
                    self.gaps.append(now - s[3])
                s[1] -= 1
                s[3] = now
                self.tokens += 1
                self.last_ns = now
                if s[1] > 0:
                    still.append(s)
                else:
                    s[4].set_result(None)
            self.running = still + self.running  # and those that came during the step
            next_at += self.step_s
            await asyncio.sleep(max(0.0, next_at - loop.time()))

    def write_stats(self, folder: str) -> None:
        """This process's true gaps, in a file of its own (one with none: ``gaps`` 0), so that
        a reader can wait for every process's."""
        gaps = sorted(self.gaps)

        def pct(q: float) -> float | None:
            return gaps[min(len(gaps) - 1, int(q * len(gaps)))] / 1e6 if gaps else None

        part = Path(folder, f".{os.getpid()}.part")  # renamed whole: never read half-written
        part.write_text(
            json.dumps({"gaps": len(gaps), "p50_ms": pct(0.5), "p99_ms": pct(0.99),
                        "max_ms": gaps[-1] / 1e6 if gaps else None, "tokens": self.tokens,
                        "last_ns": self.last_ns, "arrivals": self.arrivals})
        )  # fmt: skip
        part.replace(Path(folder, f"{os.getpid()}.json"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--ttft-ms", type=float, default=0.0, help="a wait before the first token")
    ap.add_argument("--model", default="stub-model", help="the id /v1/models lists")
    ap.add_argument("--processes", type=int, default=1, help="serving processes on the port")
    ap.add_argument("--step-ms", type=float, help="a token to every stream each step")
    ap.add_argument("--stats-dir", help="with --step-ms: write each process's true gaps here")
    ap.add_argument("--text", default=" tok", help="with --step-ms: each token's text")
    ap.add_argument("--answer-as", help="answers name this model, not the one asked for")
    ap.add_argument(
        "--diverge-above", type=int, help="with more than this many in flight, answers differ"
    )
    ap.add_argument(
        "--answer-as-after", type=int, default=0, help="--answer-as: after this many answers"
    )
    args = ap.parse_args()
    for _ in range(args.processes - 1):
        if os.fork() == 0:  # a child serves too, on the same port
            break
    app = web.Application()
    app["itl_s"] = args.itl_ms / 1000
    app["ttft_s"] = args.ttft_ms / 1000
    app["answer_as"] = (args.answer_as, args.answer_as_after) if args.answer_as else None
    app["diverge_above"] = args.diverge_above
    app["engine"] = engine = (
        None if args.step_ms is None else Engine(args.step_ms / 1000, args.text)
    )
    if engine is not None and args.stats_dir:

        async def stats(app: web.Application) -> None:
            engine.write_stats(args.stats_dir)

        app.on_shutdown.append(stats)
    app.router.add_post("/v1/completions", handle)
    app.router.add_post("/v1/chat/completions", handle)

    async def models(request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": args.model, "object": "model"}]}
        )

    app.router.add_get("/v1/models", models)
    # counters live in a dict of their own: a started app's own keys are frozen
    app["state"] = {"running": 0, "ttft_sum": 0.0, "ttft_count": 0, "served": 0, "diverged": 0}

    async def metrics(request: web.Request) -> web.Response:
        """vLLM's names: requests running now, a fixed KV-cache usage, the TTFT histogram's
        sum and count (each request's first chunk goes out at once: 1 ms, counted here)."""
        a = request.app["state"]
        text = (
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="{args.model}"}} {a["running"]}\n'
            f'vllm:num_requests_waiting{{model_name="{args.model}"}} 0\n'
            f'vllm:kv_cache_usage_perc{{model_name="{args.model}"}} 0.25\n'
            f'vllm:time_to_first_token_seconds_sum{{model_name="{args.model}"}} {a["ttft_sum"]}\n'
            f'vllm:time_to_first_token_seconds_count{{model_name="{args.model}"}} {a["ttft_count"]}\n'
        )
        return web.Response(text=text, content_type="text/plain")

    app.router.add_get("/metrics", metrics)

    async def stats(request: web.Request) -> web.Response:
        """The server's own counts: answers served, and how many it made differ."""
        return web.json_response(request.app["state"])

    app.router.add_get("/stats", stats)
    web.run_app(
        app,
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        print=None,
        reuse_port=args.processes > 1,
    )


if __name__ == "__main__":
    main()
