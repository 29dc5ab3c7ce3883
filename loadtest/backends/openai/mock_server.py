"""``loadtest mock-server``: an OpenAI-compatible server with no model, to try a pipeline, a CI
job or a container with no GPU. Standard library only (asyncio streams, HTTP/1.1 keep-alive).

Serves ``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions`` (streamed as SSE, one
token a chunk, then a closing chunk with ``usage`` and ``[DONE]``; or one JSON answer),
``/v1/embeddings``, and ``/metrics`` in vLLM's names. Its timing is set: a wait before the first
token (``ttft_ms``), then either a gap between each stream's tokens (``itl_ms``) or, with
``step_ms``, one token to every running stream each step, as a batching engine decodes. It
listens on loopback unless told otherwise. Request bodies are bounded (1 MiB) and headers too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_BODY = 1 << 20
MAX_HEADER_LINES = 100
TOKEN = " tok"


@dataclass
class MockSettings:
    """How the mock server answers."""

    model: str = "mock-model"
    # a small model's pace by default, so a first run's figures are ones a client can stamp
    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    step_ms: float | None = None
    dimensions: int = 8  # an embedding's length


@dataclass
class _State:
    running: int = 0
    ttft_sum_s: float = 0.0
    ttft_count: int = 0
    tick: asyncio.Event = field(default_factory=asyncio.Event)


class MockServer:
    """The server: ``await start(host, port)``, ``port`` once bound, ``close()``."""

    def __init__(self, settings: MockSettings) -> None:
        self.settings = settings
        self.state = _State()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._ticker: asyncio.Task[None] | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = await asyncio.start_server(self._connection, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.settings.step_ms:
            self._ticker = asyncio.create_task(self._steps(self.settings.step_ms / 1000))

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _steps(self, step_s: float) -> None:
        """Every step, each running stream may send its next token (one timer for all)."""
        while True:
            await asyncio.sleep(step_s)
            tick, self.state.tick = self.state.tick, asyncio.Event()
            tick.set()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One request on a kept-alive connection; False when the client closed it."""
        line = await reader.readline()
        if not line:
            return False
        method, path, _ = line.decode("latin-1").split(" ", 2)
        length = 0
        for _ in range(MAX_HEADER_LINES):
            header = await reader.readline()
            if header in (b"\r\n", b"\n", b""):
                break
            name, _, value = header.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length > MAX_BODY:
            await _send(writer, 413, {"error": {"message": "body too large"}})
            return False
        body = json.loads(await reader.readexactly(length)) if length else {}
        path = path.split("?", 1)[0].rstrip("/")
        if method == "GET" and path == "/v1/models":
            data = [{"id": self.settings.model, "object": "model", "owned_by": "loadtest"}]
            await _send(writer, 200, {"object": "list", "data": data})
        elif method == "GET" and path == "/metrics":
            await _send_text(writer, self._metrics())
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            await self._generate(writer, body if isinstance(body, dict) else {}, path)
        elif method == "POST" and path == "/v1/embeddings":
            await _send(writer, 200, self._embeddings(body if isinstance(body, dict) else {}))
        else:
            await _send(writer, 404, {"error": {"message": f"no {method} {path} here"}})
        return True

    async def _generate(self, writer: asyncio.StreamWriter, body: dict, path: str) -> None:
        chat = path.endswith("/chat/completions")
        n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        n = max(1, min(n, 1 << 16))
        kind = "chat.completion.chunk" if chat else "text_completion"
        rid, model = f"mock-{time.monotonic_ns()}", str(body.get("model") or self.settings.model)
        usage = {"prompt_tokens": 16, "completion_tokens": n, "total_tokens": 16 + n}
        self.state.running += 1
        start = time.monotonic()
        try:
            await asyncio.sleep(self.settings.ttft_ms / 1000)
            if not body.get("stream"):
                await self._pace(n - 1)
                text = TOKEN * n
                choice = (
                    {"index": 0, "message": {"role": "assistant", "content": text}}
                    if chat
                    else {"index": 0, "text": text}
                )
                self._first(start)
                answer = {"id": rid, "object": kind.removesuffix(".chunk"), "model": model,
                          "choices": [{**choice, "finish_reason": "length"}], "usage": usage}  # fmt: skip
                await _send(writer, 200, answer)
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")  # fmt: skip
            for i in range(n):
                if i:
                    await self._pace(1)
                else:
                    self._first(start)
                part = {"delta": {"content": TOKEN}} if chat else {"text": TOKEN}
                event = {
                    "id": rid,
                    "object": kind,
                    "model": model,
                    "choices": [{"index": 0, **part}],
                }
                await _chunk(writer, b"data: " + json.dumps(event).encode() + b"\n\n")
            closing: dict[str, object] = {"delta": {}} if chat else {"text": ""}
            last = {"id": rid, "object": kind, "model": model, "usage": usage,
                    "choices": [{"index": 0, "finish_reason": "length", **closing}]}  # fmt: skip
            await _chunk(writer, b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
            await _chunk(writer, b"")
        finally:
            self.state.running -= 1

    async def _pace(self, tokens: int) -> None:
        """The time ``tokens`` more tokens take: a gap each, or a step each."""
        for _ in range(tokens):
            if self.settings.step_ms:
                # cannot hang: the ticker sets this event every step while the server runs
                await self.state.tick.wait()
            elif self.settings.itl_ms:
                await asyncio.sleep(self.settings.itl_ms / 1000)

    def _first(self, start: float) -> None:
        self.state.ttft_sum_s += time.monotonic() - start
        self.state.ttft_count += 1

    def _embeddings(self, body: dict) -> dict:
        texts = body.get("input")
        inputs = texts if isinstance(texts, list) else [texts]
        dims = self.settings.dimensions
        data = [{"object": "embedding", "index": i, "embedding": [1 / dims] * dims}
                for i in range(len(inputs))]  # fmt: skip
        return {"object": "list", "data": data, "model": self.settings.model,
                "usage": {"prompt_tokens": 16 * len(inputs), "total_tokens": 16 * len(inputs)}}  # fmt: skip

    def _metrics(self) -> str:
        """vLLM's names, so the run's server section reads them."""
        s, label = self.state, f'{{model_name="{self.settings.model}"}}'
        return (
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{label} {s.running}\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{label} 0\n"
            "# TYPE vllm:time_to_first_token_seconds summary\n"
            f"vllm:time_to_first_token_seconds_sum{label} {s.ttft_sum_s}\n"
            f"vllm:time_to_first_token_seconds_count{label} {s.ttft_count}\n"
        )


async def _send(writer: asyncio.StreamWriter, status: int, doc: dict) -> None:
    body = json.dumps(doc).encode()
    reason = {200: "OK", 404: "Not Found", 413: "Payload Too Large"}.get(status, "Error")
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
    await writer.drain()


async def _send_text(writer: asyncio.StreamWriter, text: str) -> None:
    body = text.encode()
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
    await writer.drain()


async def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    """One piece of a chunked body (empty: its end)."""
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()


async def serve(
    settings: MockSettings, host: str, port: int, ready: Callable[[str], None] | None = None
) -> None:
    """Serve until cancelled; ``ready(url)`` once listening."""
    server = MockServer(settings)
    await server.start(host, port)
    if ready is not None:
        ready(f"http://{host}:{server.port}/v1")
    try:
        await asyncio.Event().wait()  # until cancelled (Ctrl-C, SIGTERM): no deadline by design
    finally:
        await server.close()
