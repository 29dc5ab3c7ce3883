"""A stream's failures over a real socket, read by read or in batches: one silent for
``backend.read_timeout`` fails as ``read_timeout``, one cut mid-body as ``stream_cut``, each
keeping the tokens it read before; one whose reads keep coming runs past the timeout in all."""

from __future__ import annotations

import asyncio
import time

import pytest

from loadtest.backends.openai.stream import Stream
from loadtest.transport.http1 import HttpFailure
from loadtest.transport.wire import Wire
from tests.unit.backends.raw_sse import END, HEAD, event, serving, take_request

TIMEOUT_S = 0.3


def _server(gaps: list[float], cut: bool = False):
    """Headers, then a token after each gap in ``gaps``, the last one ending the stream (or,
    ``cut``, the connection closed after it, mid-body)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await take_request(reader)
        writer.write(HEAD)
        for k, gap in enumerate(gaps):
            await asyncio.sleep(gap)
            last = k == len(gaps) - 1 and not cut
            writer.write(event("t", "length" if last else None) + (END if last else b""))
            await writer.drain()
        if not cut:
            await asyncio.sleep(1)
        writer.close()

    return serve


async def _read(gaps: list[float], batched: bool, cut: bool = False):
    stream = Stream("completions", len(gaps), keep_reply=False)
    start = time.monotonic()
    async with serving(_server(gaps, cut), read_timeout_s=TIMEOUT_S) as (pool, url):
        resp = await pool.request("POST", url, b"{}", Wire(), eager=not batched)
        try:
            ended = await stream.read(resp.batch, time.monotonic_ns, None, resp.reads)
        except HttpFailure as exc:  # classified as the client does
            ended = exc.kind
        finally:
            resp.release()
        took = time.monotonic() - start
    return ended, len(stream.chunks), took


@pytest.mark.parametrize("batched", [False, True], ids=["read by read", "in batches"])
def test_a_stream_silent_past_the_read_timeout_fails_as_read_timeout(batched):
    # a token at once, then silence for ten timeouts: it fails a timeout after that token
    ended, tokens, took = asyncio.run(_read([0.0, 10 * TIMEOUT_S], batched))
    assert ended == "read_timeout" and tokens == 1
    assert TIMEOUT_S <= took < 5 * TIMEOUT_S


@pytest.mark.parametrize("batched", [False, True], ids=["read by read", "in batches"])
def test_a_stream_whose_reads_keep_coming_runs_past_the_read_timeout(batched):
    # ten tokens a third of the timeout apart: 1 s in all, more than three timeouts
    ended, tokens, took = asyncio.run(_read([TIMEOUT_S / 3] * 10, batched))
    assert ended is None and tokens == 10 and took >= 3 * TIMEOUT_S


@pytest.mark.parametrize("batched", [False, True], ids=["read by read", "in batches"])
def test_a_stream_cut_mid_body_fails_as_cut_and_keeps_what_it_read(batched):
    ended, tokens, _ = asyncio.run(_read([0.0, 0.0, 0.0], batched, cut=True))
    assert ended == "stream_cut" and tokens == 3
