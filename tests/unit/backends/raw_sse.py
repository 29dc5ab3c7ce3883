"""A hand-written streaming server on a real socket, and loadtest's own connection pool to it:
for tests of how a stream's bytes are read, stamped and timed out, where the server's writes
(their sizes, gaps and cuts) must be exactly what the test says."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from loadtest.transport.pool import ConnectionPool
from loadtest.transport.settings import ClientSettings

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
END = b"0\r\n\r\n"  # the chunked body's end


def event(text: str, reason: str | None = None, chunk_bytes: int | None = None) -> bytes:
    """A completions chunk as one SSE event, in one HTTP chunk (as servers send), or cut into
    HTTP chunks of ``chunk_bytes``."""
    chunk = {"choices": [{"index": 0, "text": text, "finish_reason": reason}]}
    data = b"data: " + json.dumps(chunk).encode() + b"\n\n"
    step = chunk_bytes or len(data)
    pieces = [data[k : k + step] for k in range(0, len(data), step)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)


async def take_request(reader: asyncio.StreamReader) -> None:
    """The request's head, and its body (small: one read)."""
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    await reader.read(1 << 16)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(
    handler: Handler, read_timeout_s: float = 5.0, max_connections: int = 4
) -> AsyncIterator[tuple[ConnectionPool, str]]:
    """``handler`` serving on loopback, and loadtest's pool of connections to it (its reads
    stamped on ``time.monotonic_ns``): ``(pool, the completions URL)``."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/completions"
    settings = ClientSettings(connect_timeout_s=5.0, read_timeout_ns=int(read_timeout_s * 1e9))
    pool = ConnectionPool(url, settings, max_connections, time.monotonic_ns)
    try:
        yield pool, url
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()
