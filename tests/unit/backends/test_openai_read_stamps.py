"""A stream's tokens are stamped when the socket read that brought them came in, not when its
coroutine next ran: over a real socket, a stream whose coroutine reads late (as one behind many
others on a busy loop would) still gets each token's arrival, read by read or in batches."""

from __future__ import annotations

import asyncio
import time

import pytest

from loadtest.backends.openai.connection import Wire, body_batches, read_stamps
from loadtest.backends.openai.stream import Stream
from tests.unit.backends.raw_sse import END, HEAD, event, serving, take_request

pytest.importorskip("aiohttp")

GAP_S = 0.05  # the server's wait between the two tokens
LATE_S = 0.3  # how long after the headers the stream's coroutine starts reading


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await take_request(reader)
    writer.write(HEAD + event("a"))
    await writer.drain()
    await asyncio.sleep(GAP_S)
    writer.write(event("b", "length"))
    await writer.drain()
    await asyncio.sleep(GAP_S)
    writer.write(END)  # no [DONE]: the finish reason ends it
    await writer.drain()
    writer.close()


async def _stamps(stamped: bool, batched: bool = False) -> tuple[list[int], int, object]:
    async with serving(_serve) as (session, url):
        async with session.post(url, data=b"{}", trace_request_ctx=Wire()) as resp:
            reads = read_stamps(resp) if stamped else None
            await asyncio.sleep(LATE_S)  # the loop is free; this stream reads late
            start = time.monotonic_ns()
            stream = Stream("completions", 2, keep_reply=False)
            batches = body_batches(resp) if batched else None
            ended = await stream.read(resp.content, time.monotonic_ns, reads=reads, batches=batches)
        return [t for t, _ in stream.chunks], start, ended


@pytest.mark.parametrize("batched", [False, True], ids=["read by read", "in batches"])
def test_each_token_is_stamped_at_its_reads_arrival_however_late_it_is_read(batched):
    stamps, start, ended = asyncio.run(_stamps(stamped=True, batched=batched))
    assert ended is None and len(stamps) == 2
    # both came in before the coroutine looked (the second GAP_S after the first, LATE_S
    # before it looked): their own arrivals, GAP_S apart (less only by how late the first was)
    assert stamps[1] < start
    assert stamps[1] - stamps[0] >= GAP_S * 1e9 / 2


def test_without_the_connections_stamps_a_token_is_stamped_when_its_read_is_taken():
    stamps, start, ended = asyncio.run(_stamps(stamped=False))
    assert ended is None and len(stamps) == 2
    assert stamps[0] >= start and stamps[1] - stamps[0] < GAP_S * 1e9 / 2


BURST = 400  # events of a byte an HTTP chunk: ~24,000 chunks, past aiohttp's 16,384 unread


async def _serve_burst(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await take_request(reader)
    writer.write(HEAD)
    await writer.drain()
    await asyncio.sleep(GAP_S)  # the reader is waiting for a batch by now
    writer.write(b"".join(event(f"t{k}", chunk_bytes=1) for k in range(BURST)))
    await writer.drain()
    await asyncio.sleep(GAP_S)
    writer.write(event("end", "length", chunk_bytes=1) + END)
    await writer.drain()
    writer.close()


def test_a_burst_of_tiny_chunks_that_pauses_the_socket_wakes_the_batch_reader():
    """A reader waiting for its batch, and a burst of tiny HTTP chunks, few bytes but more
    unread chunks than aiohttp holds: it pauses the socket, so the body's end can only come
    once the reader takes what is there. The pause wakes the reader (else it would wait for
    an end that never comes: 5 s, then a timeout); every token comes, in order."""

    async def main():
        async with serving(_serve_burst) as (session, url):
            async with session.post(url, data=b"{}", trace_request_ctx=Wire()) as resp:
                reads, batches = read_stamps(resp), body_batches(resp)
                assert batches is not None
                stream = Stream("completions", BURST + 1, keep_reply=False)
                ended = await asyncio.wait_for(
                    stream.read(resp.content, time.monotonic_ns, reads=reads, batches=batches),
                    5,
                )
            return stream, ended

    stream, ended = asyncio.run(main())
    assert ended is None
    assert [text for _, text in stream.chunks] == [*(f"t{k}" for k in range(BURST)), "end"]
    t = [t for t, _ in stream.chunks]
    assert t == sorted(t)
