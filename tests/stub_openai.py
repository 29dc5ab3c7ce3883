"""A recording OpenAI-compatible stub server for tests, in a thread of the test process.

It streams ``max_tokens`` one-word chunks whose words say which request they answer (so a test
can find a reply in a later request's history), keeps every request body, and can offer the
extra endpoints some servers have: vLLM's ``/tokenize`` and ``/start_profile``/``/stop_profile``.
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
    profiler: bool = False  # vLLM's /start_profile and /stop_profile
    bodies: list[dict] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # paths of every non-generation request
    arrivals: dict[str, int] = field(default_factory=dict)  # reply tag -> monotonic ns on arrival
    url: str = ""

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
        app.router.add_get("/v1/models", self._models)
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

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        self.calls.append(request.path)
        body = await request.json()
        text = body.get("prompt")
        if text is None:  # a chat: the same plain rendering the client falls back to
            text = " ".join(m["content"] for m in body["messages"])
        return web.json_response({"count": -(-len(text) // 4), "max_model_len": 4096, "tokens": []})

    async def _profile(self, request: web.Request) -> web.Response:
        self.calls.append(request.path)
        return web.Response(text="")

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic_ns()
        body = await request.json()
        self.bodies.append(body)
        n = int(body.get("max_tokens") or 4)
        chat = request.path.endswith("/chat/completions")
        tag = f"r{len(self.bodies)}"
        self.arrivals[tag] = arrived
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(n):
            word = f"{tag}w{i} "
            choice = (
                {"index": 0, "delta": {"content": word}} if chat else {"index": 0, "text": word}
            )
            chunk = {"id": tag, "model": body["model"], "choices": [choice]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        last = {
            "id": tag,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "length", "delta": {}, "text": ""}],
            "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1},
        }
        await resp.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def reply_text(self, index: int, n: int) -> str:
        """The text the ``index``-th generation request (1-based) was answered with."""
        return "".join(f"r{index}w{i} " for i in range(n))
