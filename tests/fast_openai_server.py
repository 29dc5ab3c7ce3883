"""A fast OpenAI-compatible streaming endpoint for benchmarking the client (not a test double:
the HTTP backend's tests run against the real ``transformers serve``).

Lists one model at /v1/models; answers /v1/completions and /v1/chat/completions at once: ``max_tokens`` SSE chunks of one token
each, a final chunk with ``usage``, then ``[DONE]``, with an optional delay between tokens.

    python tests/fast_openai_server.py --port 8123 [--itl-ms 0] [--processes 1]

``--processes N`` serves from N processes on one port (SO_REUSEPORT), so that a client with many
workers measures itself, not this server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

from aiohttp import web


async def handle(request: web.Request) -> web.StreamResponse:
    # when the request reached the handler, on CLOCK_MONOTONIC: the response id carries it, so a
    # client's per-request export shows how late each request arrived (bench/send_lateness.py)
    arrived = f"arrived-{time.monotonic_ns()}"
    body = await request.json()
    chat = request.path.endswith("/chat/completions")
    n = int(body.get("max_tokens") or 16)
    itl = request.app["itl_s"]
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    request.app["state"]["running"] += 1
    request.app["state"]["ttft_sum"] += 0.001
    request.app["state"]["ttft_count"] += 1
    kind = "chat.completion.chunk" if chat else "text_completion"
    for _i in range(n):
        choice = (
            {"index": 0, "delta": {"content": " tok"}} if chat else {"index": 0, "text": " tok"}
        )
        await resp.write(
            b"data: "
            + json.dumps(
                {"id": arrived, "object": kind, "model": body["model"], "choices": [choice]}
            ).encode()
            + b"\n\n"
        )
        if itl:
            await asyncio.sleep(itl)
    last = {
        "id": arrived,
        "object": kind,
        "model": body["model"],
        "choices": [
            {"index": 0, "finish_reason": "length", **({"delta": {}} if chat else {"text": ""})}
        ],
        "usage": {"prompt_tokens": 16, "completion_tokens": n, "total_tokens": 16 + n},
    }
    await resp.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
    request.app["state"]["running"] -= 1
    await resp.write_eof()
    return resp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--model", default="stub-model", help="the id /v1/models lists")
    ap.add_argument("--processes", type=int, default=1, help="serving processes on the port")
    args = ap.parse_args()
    for _ in range(args.processes - 1):
        if os.fork() == 0:  # a child serves too, on the same port
            break
    app = web.Application()
    app["itl_s"] = args.itl_ms / 1000
    app.router.add_post("/v1/completions", handle)
    app.router.add_post("/v1/chat/completions", handle)

    async def models(request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": args.model, "object": "model"}]}
        )

    app.router.add_get("/v1/models", models)
    # counters live in a dict of their own: a started app's own keys are frozen
    app["state"] = {"running": 0, "ttft_sum": 0.0, "ttft_count": 0}

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
