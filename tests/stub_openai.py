"""A recording OpenAI-compatible stub server for tests, in a thread of the test process.

It streams ``max_tokens`` one-word chunks whose words say which request they answer (so a test
can find a reply in a later request's history), keeps every request body, and can offer the
extra endpoints some servers have: vLLM's ``/tokenize`` and ``/start_profile``/``/stop_profile``.

It also answers the other APIs the way vLLM does: ``/embeddings`` (a 4-float embedding an
input, 3 prompt tokens an input), ``/rerank`` (a score a document, 5 tokens a document) and
``/responses`` (the Responses API's events, a word a delta); a chat request with ``tools``
gets one tool call whose arguments ``tool_arguments`` gives, streamed in 3 fragments, and
``reasoning`` makes a chat answer's first that many words reasoning_content.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class StubServer:
    tokenize: bool = False  # vLLM's /tokenize (a token every 4 bytes, rounded up)
    tokenize_count: int | None = None  # what /tokenize answers whatever the text (a broken one)
    profiler: bool = False  # vLLM's /start_profile and /stop_profile
    bodies: list[dict] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # paths of every non-generation request
    arrivals: dict[str, int] = field(default_factory=dict)  # reply tag -> monotonic ns on arrival
    url: str = ""
    reasoning: int = 0  # a chat answer's first words that are reasoning_content
    tool_arguments: str = '{"city": "Paris"}'  # a tool call's arguments, as streamed
    answer: str = '{"title": "t", "score": 7}'  # what a request with response_format gets
    word_gap_s: float = 0.0  # a pause before each streamed word (a decode step)
    left: list[str] = field(default_factory=list)  # reply tags whose client left mid-stream
    # /metrics with vLLM's names, each model's series labelled with it: a request to model M
    # counts queue_s[M] of queue time and twice that of TTFT (a gateway of several models)
    queue_s: dict[str, float] | None = None
    served: dict[str, int] = field(default_factory=dict)  # requests a model got

    def __enter__(self) -> StubServer:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        assert ready.wait(30), "stub server did not start"
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main(ready))

    async def _main(self, ready: threading.Event) -> None:
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/completions", self._generate)
        app.router.add_post("/v1/chat/completions", self._generate)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/v1/rerank", self._rerank)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/v1/models", self._models)
        if self.queue_s is not None:
            app.router.add_get("/metrics", self._metrics)
        if self.tokenize:
            app.router.add_post("/tokenize", self._tokenize)
        if self.profiler:
            app.router.add_post("/start_profile", self._profile)
            app.router.add_post("/stop_profile", self._profile)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"
        ready.set()
        await self._stop.wait()
        await runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        assert self.queue_s is not None
        lines = []
        for model, queue in self.queue_s.items():
            n = self.served.get(model, 0)
            label = f'{{model_name="{model}"}}'
            lines += [
                f"vllm:num_requests_waiting{label} 0",
                f"vllm:request_queue_time_seconds_sum{label} {n * queue}",
                f"vllm:request_queue_time_seconds_count{label} {n}",
                f"vllm:time_to_first_token_seconds_sum{label} {n * 2 * queue}",
                f"vllm:time_to_first_token_seconds_count{label} {n}",
            ]
        return web.Response(text="\n".join(lines) + "\n")

    async def _models(self, request: web.Request) -> web.Response:
        names = list(self.queue_s or {"stub": 0})
        data = [{"id": name, "object": "model"} for name in names]
        return web.json_response({"object": "list", "data": data})

    async def _tokenize(self, request: web.Request) -> web.Response:
        self.calls.append(request.path)
        body = await request.json()
        text = body.get("prompt")
        if text is None:  # a chat: the same plain rendering the client falls back to
            text = " ".join(m["content"] for m in body["messages"])
        count = self.tokenize_count or -(-len(text) // 4)
        return web.json_response({"count": count, "max_model_len": 4096, "tokens": []})

    async def _profile(self, request: web.Request) -> web.Response:
        self.calls.append(request.path)
        return web.Response(text="")

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic_ns()
        body = await request.json()
        self.bodies.append(body)
        model = str(body.get("model"))
        self.served[model] = self.served.get(model, 0) + 1
        n = int(body.get("max_tokens") or 4)
        chat = request.path.endswith("/chat/completions")
        tag = f"r{len(self.bodies)}"
        self.arrivals[tag] = arrived
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        deltas = [
            {"reasoning_content" if i < self.reasoning else "content": f"{tag}w{i} "}
            for i in range(n)
        ]
        if chat and body.get("tools"):  # one call to the first tool, its arguments in 3 parts
            name = body["tools"][0]["function"]["name"]
            a = self.tool_arguments
            cuts = [0, len(a) // 3, 2 * len(a) // 3, len(a)]
            deltas = [{"tool_calls": [{"index": 0, "id": "call0", "function": {"name": name}}]}]
            deltas += [
                {"tool_calls": [{"index": 0, "function": {"arguments": a[x:y]}}]}
                for x, y in zip(cuts, cuts[1:])
            ]
            n = len(deltas)
        elif chat and body.get("response_format"):  # the answer, in up to n parts
            a, k = self.answer, min(n, len(self.answer))
            cuts = [len(a) * j // k for j in range(k + 1)]
            deltas = [{"content": a[x:y]} for x, y in zip(cuts, cuts[1:])]
            n = len(deltas)
        reason = (
            "tool_calls"
            if chat and body.get("tools")
            else "stop"
            if chat and body.get("response_format")
            else "length"
        )
        for i in range(n):
            word = f"{tag}w{i} "
            choice = {"index": 0, "delta": deltas[i]} if chat else {"index": 0, "text": word}
            chunk = {"id": tag, "model": body["model"], "choices": [choice]}
            if self.word_gap_s:
                await asyncio.sleep(self.word_gap_s)
            try:
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            except ConnectionResetError:  # the client closed the connection: stop, as vLLM does
                self.left.append(tag)
                return resp
        last = {
            "id": tag,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": reason, "delta": {}, "text": ""}],
            "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1},
        }
        await resp.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [
            {"index": i, "object": "embedding", "embedding": [0.5, -0.5, 0.25, 0.0]}
            for i in range(len(inputs))
        ]
        usage = {"prompt_tokens": 3 * len(inputs), "total_tokens": 3 * len(inputs)}
        return web.json_response({"id": f"e{len(self.bodies)}", "data": data, "usage": usage})

    async def _rerank(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        docs = body["documents"]
        results = [{"index": i, "relevance_score": 1 / (i + 1)} for i in range(len(docs))]
        usage = {"total_tokens": 5 * len(docs)}
        return web.json_response({"id": f"k{len(self.bodies)}", "results": results, "usage": usage})

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        n = int(body.get("max_output_tokens") or 4)
        tag = f"r{len(self.bodies)}"
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        response = {"id": tag, "model": body["model"], "status": "in_progress"}

        async def send(kind: str, **fields) -> None:
            event = {"type": kind, **fields}
            await resp.write(f"event: {kind}\ndata: {json.dumps(event)}\n\n".encode())

        await send("response.created", response=response)
        for i in range(n):
            await send("response.output_text.delta", delta=f"{tag}w{i} ", output_index=0)
        usage = {"input_tokens": 2, "output_tokens": n, "total_tokens": n + 2}
        await send(
            "response.completed", response={**response, "status": "completed", "usage": usage}
        )
        await resp.write_eof()
        return resp

    def reply_text(self, index: int, n: int) -> str:
        """The text the ``index``-th generation request (1-based) was answered with."""
        return "".join(f"r{index}w{i} " for i in range(n))
