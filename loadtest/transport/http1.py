"""The token path's HTTP: one HTTP/1.1 connection of loadtest's own client, and the response it
reads (``pool.ConnectionPool`` keeps the connections).

A streamed response costs its client once per socket read, and a served model sends a read a
token. Through aiohttp a read runs about ten Python calls: its protocol, its parser's callbacks
for each HTTP chunk, and its buffer resuming the protocol for every piece taken. Here a read is
one call, ``data_received``: it stamps the read, strips the chunked framing and keeps the body's
bytes. The stream's coroutine wakes a few times a response to take them (``Response.batch``).
``bench/stream_reading.py`` measures the difference. Every call of the openai backend goes this
way: the requests, the probe, ``/tokenize``, ``/models`` and the profiler's endpoints.

What it speaks: HTTP/1.1 over TCP, TLS or a Unix socket (through a proxy where one is set:
``settings``), one request at a time a connection, kept alive and
pooled (at most ``max_connections``: 0 is unbounded). The request body is sent whole, with its
Content-Length. A response body may be chunked, of a Content-Length, or end with the
connection. It asks for ``Accept-Encoding: identity``: a compressed stream is refused, since
its bytes could not be stamped as they arrive. A redirect is not followed: it fails as its
status, with its Location in the message.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

from loadtest.transport.chunked import Chunks
from loadtest.transport.head import take_head
from loadtest.transport.peer import peer_closed
from loadtest.transport.tls import tls_failure
from loadtest.transport.wire import Wire

# a stream's coroutine wakes once this much of its body is unread, at its end, or on a failure
BATCH_BYTES = 32 << 10
# past this much unread, the socket is not read until the stream takes some (memory stays
# bounded; the kernel holds the rest, and its stamps are the later reads')
PAUSE_BYTES = 4 << 20


# where a connection's current response is
_IDLE, _HEAD, _CHUNKED, _LENGTH, _TO_CLOSE, _DONE = range(6)


class HttpFailure(Exception):
    """A request that failed on the wire. ``kind`` is the result's error type (connect_error,
    tls_error, connect_timeout, read_timeout, server_disconnected, stream_cut,
    connection_reset, bad_http); ``connecting``: it never connected (the server may be down);
    ``unsent``: no byte of the request was written, so the server never had it."""

    def __init__(
        self, kind: str, message: str, connecting: bool = False, unsent: bool = False
    ) -> None:
        super().__init__(message)
        self.kind, self.connecting, self.unsent = kind, connecting, unsent


class Owner(Protocol):
    """What a connection needs of its pool (``pool.ConnectionPool``): the clock, and to hear
    when the connection is done with or lost."""

    now: Callable[[], int]

    def released(self, conn: Connection, keep: bool) -> None: ...

    def lost(self, conn: Connection) -> None: ...


class Connection(asyncio.Protocol):
    """One kept-alive connection and the response it is reading now. Its ``pool``
    (``pool.ConnectionPool``) gives the clock (``now``) and hears when it is done with
    (``released``) or lost (``lost``)."""

    def __init__(self, pool: Owner) -> None:
        self.pool = pool
        self.now = pool.now
        self.transport: Any = None
        self.lost = False  # the connection is gone (either side closed it)
        self.counted = True  # in the pool's count of open connections
        self.idle_since_ns = 0  # when it last went back to its pool, kept alive
        self.reusable = True  # may carry another request once this response is read
        self.state = _IDLE
        self.unsolicited = b""  # bytes the server sent with no request out (a banner): closed
        self.read_timeout = ReadTimeout(self)
        self._reset(1)

    def _reset(self, wake_bytes: int) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        # a read each: its ns, and the body's bytes by then (ints in two lists: a token's read
        # leaves no object behind for the collector to trace while the stream lasts)
        self.read_ns: list[int] = []
        self.read_ends: list[int] = []
        self.buf = bytearray()  # the body's bytes not yet taken
        self.total = 0  # the body's bytes in all
        self.error: HttpFailure | None = None
        self.wake_bytes = wake_bytes
        self.waiter: asyncio.Future | None = None  # the stream's coroutine, waiting for bytes
        self.head = b""
        self.heard_ns = 0  # when the answer's first byte came (an interim head's counts)
        self.interim = 0  # interim answers (1xx) so far
        self.need = 0  # of the body (a length)
        self.chunks = Chunks()  # a chunked body's framing
        self.paused = False
        # chunked, between chunks: ``data_received``'s one-step path may take a read
        self.at_chunk = False
        # ns the read timeout counts from: the latest read that kept no body bytes (the head,
        # a chunk's framing), a resume; the latest that kept some is ``read_ns``'s last
        self.silent_from = 0

    async def exchange(
        self,
        request: bytes,
        eager: bool,
        read_timeout_ns: int,
        wire: Wire | None = None,
        reused: bool = False,
    ) -> Response:
        """Send ``request`` (whole: head and body) and wait for the response's head.
        ``eager``: the body's batches come read by read. ``wire`` gets the send's stamp.
        ``reused``: the connection carried a request before; the server may have closed it
        since, which is looked for before anything is written."""
        self._reset(1 if eager else BATCH_BYTES)
        self.state = _HEAD
        try:
            if self.unsolicited:  # it spoke first: an SSH or FTP server, say, not HTTP
                raise HttpFailure(
                    "bad_http", f"not an HTTP status line: {self.unsolicited[:60]!r} (unasked)"
                )
            if (
                self.lost
                or self.transport.is_closing()
                or (reused and peer_closed(self.transport.get_extra_info("socket")))
            ):  # closed since it was pooled: nothing is written, the request is the client's
                raise HttpFailure(
                    "server_disconnected", "the server had closed the connection", unsent=True
                )
            # stamped as the bytes go: a write that wakes a server on this host may hand it
            # the core, and a stamp after the write would then carry the server's time
            if wire is not None:
                wire.sent_ns, wire.cpu_sent_ns = self.now(), time.thread_time_ns()
            self.transport.write(request)
            self.read_timeout.arm(self.now(), read_timeout_ns)
            if self.status == 0 and self.error is None:
                self.waiter = waiter = asyncio.get_running_loop().create_future()
                await waiter
            if self.status == 0:
                raise self.error or HttpFailure("server_disconnected", "no response")
            if wire is not None:
                wire.first_byte_ns = self.heard_ns
        except BaseException:
            Response(self).close()
            raise
        return Response(self)

    @property
    def answered_nothing(self) -> bool:
        """No byte of an answer to the request it carries (or carried last) came back."""
        return not self.heard_ns

    @property
    def idle(self) -> bool:
        """Carrying no request (in the pool, or between its response and the next)."""
        return self.state == _IDLE

    # -- the loop's side -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        t = self.now()
        if self.at_chunk:  # chunked, between chunks: most reads of a stream are a whole chunk
            end = data.find(b"\r\n", 0, 10)
            got = len(data) - end - 4
            # one whole chunk, its size as servers write it (lower-case hex, no extension):
            # taken in one step; any other read is framed by the general rules (``_read``)
            if 0 < end and 0 < got and data[:end] == b"%x" % got:
                buf = self.buf
                buf += data[end + 2 : -2]
                self.total = total = self.total + got
                self.read_ns.append(t)
                self.read_ends.append(total)
                if len(buf) >= self.wake_bytes:
                    self._hand_over()
                return
        self._read(t, data)

    def _read(self, t: int, data: bytes) -> None:
        """A read at ``t``, its framing taken off by the general rules."""
        if self.state == _HEAD:
            data = self._head_in(t, data)
            if not data:
                self.silent_from = t
                return
        state = self.state
        if state == _CHUNKED:
            chunks = self.chunks
            got = chunks.take(data, self.buf)
            if chunks.failure is not None:
                self._fail(HttpFailure("bad_http", chunks.failure))
            elif chunks.ended:
                self._end(extra=chunks.extra)
            else:
                self.at_chunk = chunks.between
        elif state == _LENGTH:
            got = min(self.need, len(data))
            self.buf += data if got == len(data) else data[:got]
            self.need -= got
            if not self.need:
                self._end(extra=got < len(data))
        elif state == _TO_CLOSE:
            got = len(data)
            self.buf += data
        else:  # bytes with no request out, or past a response's end: not a server to trust
            self.reusable = False
            if state == _IDLE and not self.unsolicited:
                self.unsolicited = data[:80]
            self.transport.close()
            return
        self.silent_from = t
        if got:
            self.total += got
            self.read_ns.append(t)
            self.read_ends.append(self.total)
        self._hand_over()

    def _hand_over(self) -> None:
        """The stream's coroutine woken once ``wake_bytes`` are unread, at the end or on a
        failure; past ``PAUSE_BYTES`` unread, the socket is not read until it takes some."""
        if len(self.buf) >= PAUSE_BYTES and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        w = self.waiter
        if w is not None and (
            len(self.buf) >= self.wake_bytes or self.state == _DONE or self.paused
        ):
            self.waiter = None
            if not w.done():
                w.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.state == _TO_CLOSE and exc is None:
            self._end()
        elif self.state in (_HEAD, _CHUNKED, _LENGTH, _TO_CLOSE):
            self._fail(_lost_failure(self.state == _HEAD, exc))
        self.pool.lost(self)

    # -- the body's framing ----------------------------------------------------------------

    def _head_in(self, t: int, data: bytes) -> bytes:
        """The response head, taken from ``data`` (read at ``t``); what of ``data`` is body."""
        self.heard_ns = self.heard_ns or t
        taken = take_head(self.head + data, self.interim)
        self.head, self.interim = taken.pending, taken.interim
        if taken.error is not None:
            self._fail(HttpFailure("bad_http", taken.error))
            return b""
        got, rest = taken.head, taken.rest
        if got is None:
            return b""
        self.status, self.headers = got.status, got.headers
        if not got.keep_alive:
            self.reusable = False
        if got.refused is not None:
            self._fail(HttpFailure("bad_http", got.refused))
            return b""
        if got.body == "none":
            self._end(extra=bool(rest))
        elif got.body == "chunked":
            self.state, self.at_chunk = _CHUNKED, True
        elif got.body == "length":
            self.state, self.need = _LENGTH, got.length
        else:
            self.state = _TO_CLOSE
        self._wake()
        return rest

    # -- ends ------------------------------------------------------------------------------

    def _end(self, extra: bool = False) -> None:
        """The response is in; ``extra``: bytes came past it (nothing was asked for them)."""
        self.state, self.at_chunk = _DONE, False
        if extra:
            self.reusable = False
        self.read_timeout.stop()
        self._wake()

    def _fail(self, failure: HttpFailure) -> None:
        if self.error is None:
            self.error = failure
        self.state, self.reusable, self.at_chunk = _DONE, False, False
        self.read_timeout.stop()
        if not self.lost and self.transport is not None:
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        w, self.waiter = self.waiter, None
        if w is not None and not w.done():
            w.set_result(None)


class ReadTimeout:
    """A response's read timeout: one timer a response, which looks at the connection's
    latest read (``silent_from``, the last read's stamp) when it fires, and fails the response
    only where nothing came for the whole timeout."""

    __slots__ = ("conn", "ns", "timer")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.ns = 0  # this request's (0: none)
        self.timer: asyncio.TimerHandle | None = None

    def arm(self, sent_ns: int, ns: int) -> None:
        self.conn.silent_from, self.ns = sent_ns, ns
        if ns:
            self.timer = asyncio.get_running_loop().call_later(ns / 1e9, self._fired)

    def _fired(self) -> None:
        c = self.conn
        now = c.now()
        if c.paused:  # the client stopped reading, not the server sending
            c.silent_from = now
        latest = max(c.silent_from, c.read_ns[-1]) if c.read_ns else c.silent_from
        due = latest + self.ns
        if now >= due:
            self.timer = None
            c._fail(HttpFailure("read_timeout", f"nothing came for {self.ns / 1e9:g} s"))
        else:  # a read came meanwhile
            self.timer = asyncio.get_running_loop().call_later((due - now) / 1e9, self._fired)

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


def _lost_failure(heading: bool, exc: Exception | None) -> HttpFailure:
    """What a connection lost with a request out failed as: before the response's head
    (``heading``: the server may never have taken the request), or in its body."""
    if not heading:
        return HttpFailure(
            "stream_cut", "the connection closed mid-body" + (f" ({exc})" if exc else "")
        )
    tls = tls_failure(exc) if exc is not None else None
    if tls is not None:  # under TLS 1.3, a client certificate refused
        return HttpFailure("tls_error", tls)
    if isinstance(exc, OSError):
        return HttpFailure("connection_reset", f"the connection was reset: {exc}")
    return HttpFailure("server_disconnected", "the server closed the connection")


class Response:
    """A response as it comes: ``status``, ``headers``; the body's reads stamped as they came
    in (``reads``: each read's ns, and apart the body's bytes by then), and the body taken in
    batches."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.status, self.headers = conn.status, conn.headers
        self.reads = (conn.read_ns, conn.read_ends)
        self._done = False

    async def batch(self, limit: int) -> bytes:
        """Up to ``limit`` of the body's bytes not yet taken: once ``BATCH_BYTES`` (or, for a
        response opened ``eager``, any) are unread, at the end, or on a failure; b"" at the
        end. Where it need not wait, the loop runs first, so a long body is taken a slice at a
        time with other sockets' reads (and stamps) between. A failure is raised once the
        bytes read before it are taken: a stream keeps the tokens it read."""
        c = self._conn
        if c.state != _DONE and len(c.buf) < c.wake_bytes and not c.paused:
            c.waiter = waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                c.waiter = None
        else:
            await asyncio.sleep(0)
        buf = c.buf
        if buf:
            out = bytes(buf[:limit])
            del buf[:limit]
            if c.paused and len(buf) < PAUSE_BYTES // 2 and not c.lost:
                c.paused = False
                c.silent_from = c.now()  # the read timeout counts again, from now
                c.transport.resume_reading()
            return out
        if c.error is not None:
            raise c.error
        if c.state != _DONE:  # woken, yet nothing: another batch
            return await self.batch(limit)
        return b""

    async def read(self, limit: int) -> bytes:
        """The body to its end, or its first ``limit`` bytes where it is longer (a bounded
        read of a document: the caller tells a long one by its length)."""
        out = bytearray()
        while len(out) < limit and (piece := await self.batch(limit - len(out))):
            out += piece
        return bytes(out)

    async def text(self, limit: int = 4096) -> str:
        """The start of the body (an error's message), as text: never the whole of a hostile
        one. Empty where reading it fails."""
        try:
            return (await self.read(limit)).decode("utf-8", errors="replace")
        except HttpFailure:
            return ""

    def close(self) -> None:
        """Leave now: the connection closes (the server sees the client go)."""
        c = self._conn
        c.reusable = False
        if not c.lost and c.transport is not None:
            c.transport.close()
        self.release()

    def release(self) -> None:
        """Done with it: the connection goes back to the pool where its response ended well
        and it may be kept, else it is closed."""
        if self._done:
            return
        self._done = True
        c = self._conn
        c.read_timeout.stop()
        c._wake()
        keep = c.state == _DONE and c.error is None and c.reusable and not c.lost
        c.state, c.at_chunk = _IDLE, False
        c.pool.released(c, keep)
