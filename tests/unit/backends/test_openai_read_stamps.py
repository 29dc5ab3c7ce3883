"""A stream's tokens are stamped when the socket read that brought them came in, not when its
coroutine next ran: over a real socket, a stream whose coroutine reads late (as one behind many
others on a busy loop would) still gets each token's arrival, read by read or in batches; and a
body the stream does not keep up with stops the socket (bounded memory) and resumes it."""

from __future__ import annotations

import asyncio
import time

import pytest

from loadtest.backends.openai.stream import Stream
from loadtest.transport import http1
from loadtest.transport.wire import Wire
from tests.unit.backends.raw_sse import END, HEAD, event, serving, take_request

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


async def _stamps(stamped: bool, eager: bool = False) -> tuple[list[int], int, object]:
    async with serving(_serve) as (pool, url):
        resp = await pool.request("POST", url, b"{}", Wire(), eager=eager)
        try:
            await asyncio.sleep(LATE_S)  # the loop is free; this stream reads late
            start = time.monotonic_ns()
            stream = Stream("completions", 2, keep_reply=False)
            reads = resp.reads if stamped else None
            ended = await stream.read(resp.batch, time.monotonic_ns, reads=reads)
        finally:
            resp.release()
        return [t for t, _ in stream.chunks], start, ended


@pytest.mark.parametrize("eager", [True, False], ids=["read by read", "in batches"])
def test_each_token_is_stamped_at_its_reads_arrival_however_late_it_is_read(eager):
    stamps, start, ended = asyncio.run(_stamps(stamped=True, eager=eager))
    assert ended is None and len(stamps) == 2
    # both came in before the coroutine looked (the second GAP_S after the first, LATE_S
    # before it looked): their own arrivals, GAP_S apart (less only by how late the first was)
    assert stamps[1] < start
    assert stamps[1] - stamps[0] >= GAP_S * 1e9 / 2


def test_without_the_reads_stamps_a_token_is_stamped_when_its_read_is_taken():
    stamps, start, ended = asyncio.run(_stamps(stamped=False, eager=True))
    assert ended is None and len(stamps) == 2
    assert stamps[0] >= start and stamps[1] - stamps[0] < GAP_S * 1e9 / 2


BURST = 400  # events of a byte an HTTP chunk: ~24,000 chunks, ~20 KiB of body


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


def _read_burst(monkeypatch, pause_bytes: int | None) -> tuple[Stream, object, bool]:
    """The burst read in batches, every token in order; ``pause_bytes``: the unread body past
    which the socket stops (the stream is made to wait a while first, so it is reached)."""
    paused = []
    if pause_bytes is not None:
        monkeypatch.setattr(http1, "PAUSE_BYTES", pause_bytes)
        real_pause = http1.Connection.data_received

        def watching(self, data):
            real_pause(self, data)
            paused.append(self.paused)

        monkeypatch.setattr(http1.Connection, "data_received", watching)

    async def main():
        async with serving(_serve_burst) as (pool, url):
            resp = await pool.request("POST", url, b"{}", Wire())
            try:
                if pause_bytes is not None:
                    await asyncio.sleep(2 * GAP_S)  # the burst comes in, unread
                stream = Stream("completions", BURST + 1, keep_reply=False)
                ended = await asyncio.wait_for(
                    stream.read(resp.batch, time.monotonic_ns, reads=resp.reads), 5
                )
            finally:
                resp.release()
            return stream, ended

    stream, ended = asyncio.run(main())
    return stream, ended, any(paused)


@pytest.mark.parametrize("pause_bytes", [None, 1024], ids=["never paused", "paused at 1 KiB"])
def test_a_burst_of_tiny_chunks_comes_whole_and_in_order(monkeypatch, pause_bytes):
    """A burst of 1-byte HTTP chunks, in one write: every token comes, in order, stamped in
    order. Where the unread body passes the pause mark the socket stops being read until the
    stream takes some, and then goes on: nothing is lost or stuck (5 s bound)."""
    stream, ended, paused = _read_burst(monkeypatch, pause_bytes)
    assert ended is None
    assert [text for _, text in stream.chunks] == [*(f"t{k}" for k in range(BURST)), "end"]
    t = [t for t, _ in stream.chunks]
    assert t == sorted(t)
    assert paused == (pause_bytes is not None)
