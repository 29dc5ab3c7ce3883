"""A redirect is not followed: the run does not start, and says where it was sent and that
the base URL should say so itself."""

from __future__ import annotations

import asyncio
import threading

import yaml

from loadtest.config.loading import load_scenario
from loadtest.session import run_scenario


def _redirecting_server() -> tuple[str, asyncio.AbstractEventLoop]:
    """A server on loopback, in a thread, that answers every request with a 307."""
    loop = asyncio.new_event_loop()
    ready: list[int] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = [
            int(x.split(b":")[1])
            for x in head.split(b"\r\n")
            if x.lower().startswith(b"content-length")
        ]
        await reader.readexactly(length[0] if length else 0)
        writer.write(
            b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://elsewhere.test/v1\r\n"
            b"Content-Length: 0\r\n\r\n"
        )
        await writer.drain()
        writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        ready.append(server.sockets[0].getsockname()[1])

    threading.Thread(target=loop.run_forever, daemon=True).start()
    asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
    return f"http://127.0.0.1:{ready[0]}/v1", loop


def test_a_redirect_fails_the_start_with_where_it_pointed(tmp_path):
    url, loop = _redirecting_server()
    try:
        path = tmp_path / "s.yml"
        path.write_text(
            yaml.safe_dump(
                {
                    "name": "redirected",
                    "backend": {"kind": "openai", "base_url": url, "model": "m"},
                    "workload": {"input_tokens": 4, "output_tokens": 2},
                    "load": {"arrival": {"kind": "concurrency", "users": 1}, "requests": 1},
                }
            )
        )
        m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    finally:
        loop.call_soon_threadsafe(loop.stop)
    assert m["status"] == "failed"
    error = m["backend"]["error"]
    assert "HTTP 307" in error and "'http://elsewhere.test/v1'" in error
    assert "not followed" in error
