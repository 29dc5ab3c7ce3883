"""The HTTP side of the client: the aiohttp session (headers, TLS, pool, timeouts), the wire
stamps of each request (tracing hooks), how a failed request is classified, and the small
calls beside the requests (the server's profiler, its ``/tokenize``).

aiohttp is imported here only, inside the functions that need it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from loadtest.core import outside
from loadtest.core.events import Sent

ERROR_TEXT_CHARS = 300  # of an error body or exception message kept for the result
# a stream read in batches wakes its coroutine once this much is unread, or once aiohttp pauses
# the socket (at twice its read_bufsize unread, or more than read_bufsize/16 chunks: 512 KiB or
# 16,384 chunks by default, where tiny chunks come first)
BATCH_BYTES = 32 << 10


def open_session(spec: Any, headers: dict[str, str], base_dir: Path, now: Callable[[], int]):
    """The client's one session: a pool of ``max_connections`` (0: unbounded), the spec's
    timeouts, and the wire tracing that stamps each request's send."""
    import aiohttp

    connector = aiohttp.TCPConnector(
        limit=spec.max_connections,
        limit_per_host=0,
        ssl=_ssl_context(spec, base_dir),
        ttl_dns_cache=300,
    )
    factory = getattr(connector, "_factory", None)
    if isinstance(factory, functools.partial) and factory.func is _response_handler():
        connector._factory = functools.partial(
            stamping_protocol(now), *factory.args, **factory.keywords
        )
    return aiohttp.ClientSession(
        connector=connector,
        headers=headers,
        timeout=aiohttp.ClientTimeout(
            total=None,
            sock_connect=spec.connect_timeout / 1e9,
            sock_read=spec.read_timeout / 1e9,
        ),
        trace_configs=[_wire_trace(now)],
    )


def _response_handler() -> type:
    from aiohttp.client_proto import ResponseHandler

    return ResponseHandler


def stamping_protocol(now: Callable[[], int]) -> type:
    """aiohttp's connection protocol, stamping each socket read as the loop hands it over:
    ``of(body)`` gives ``(ns, the body's bytes by then)`` for every read of the response body
    ``body``, in order (None for another body: the stamps are of the connection's latest).

    A stream's tokens are stamped from these, not from when its coroutine next runs: when many
    streams' bytes arrive at once, the loop reads every socket first (cheap) and only then runs
    the streams one after another (parsing, recording), so the last one run would be stamped
    late by all the others' work. aiohttp has no public hook for this; where its internals
    differ (``_factory``, ``_payload``), the session keeps aiohttp's own protocol and the
    stream stamps when it gets its bytes."""
    base = _response_handler()

    class StampingProtocol(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._stamped: Any = None
            self._stamps: list[tuple[int, int]] = []
            self._read_ns = 0  # the latest socket read's arrival
            self._silent_from = 0.0  # the loop's time at the latest read (sock_read counts from)

        def data_received(self, data: bytes) -> None:
            if not data:  # aiohttp resuming its parser, on bytes it held while reading was
                # paused (or none: it does so whenever its buffer runs low); any it releases
                # came in with the latest read, not now
                super().data_received(data)
                body = self._stamped
                if body is not None and self._stamps and body.total_bytes > self._stamps[-1][1]:
                    self._stamps.append((self._read_ns, body.total_bytes))
                return
            t = self._read_ns = now()
            before = getattr(self, "_payload", None)
            super().data_received(data)
            body = getattr(self, "_payload", None) or before
            if body is None:
                return
            if body is not self._stamped:
                self._stamped, self._stamps = body, []
            self._stamps.append((t, body.total_bytes))
            waiter = getattr(body, "_eof_waiter", None)  # a reader taking the body in batches
            if waiter is not None and not waiter.done():
                if body._size >= BATCH_BYTES or self._reading_paused:
                    waiter.set_result(None)  # a batch's worth, or aiohttp stopped reading

        def of(self, body: Any) -> list[tuple[int, int]] | None:
            return self._stamps if body is self._stamped else None

        # sock_read: aiohttp cancels its timer and makes a new one at every read (each token);
        # this one is made once, and when it fires it looks at the latest read: silent for the
        # whole timeout, the read times out; else it waits out the rest from that read
        def _reschedule_timeout(self) -> None:
            timeout = self._read_timeout
            if not timeout:
                self._drop_timeout()
                return
            self._silent_from = self._loop.time()
            if self._read_timeout_handle is None:  # type: ignore[has-type]
                self._read_timeout_handle = self._loop.call_at(
                    self._silent_from + timeout, self._read_timer
                )

        def _read_timer(self) -> None:
            self._read_timeout_handle = None
            due = self._silent_from + (self._read_timeout or 0)
            if self._loop.time() >= due:
                self._on_read_timeout()
            else:  # a read came meanwhile (or the timer fired early)
                self._read_timeout_handle = self._loop.call_at(due, self._read_timer)

    return StampingProtocol


def read_stamps(resp: Any) -> list[tuple[int, int]] | None:
    """The stamps of the response body's reads, as they come in (``stamping_protocol``), or
    None where its connection does not stamp. Taken as the response starts: once the body is
    in, its connection goes back to the pool and may carry the next response."""
    protocol: Any = getattr(resp, "_protocol", None)
    return protocol.of(resp.content) if hasattr(protocol, "of") else None


def body_batches(resp: Any) -> Callable[[int], Awaitable[bytes]] | None:
    """The response body in batches, where its connection stamps its reads: each call
    ``batch(limit)`` waits for the body's end, ``BATCH_BYTES`` unread, or aiohttp pausing the
    socket (its buffer's limits), and gives up to ``limit`` of the bytes read and not yet taken
    (b"" at the end); where it need not wait, it lets the loop run first, so a long body is
    taken a slice at a time with every other socket read (and stamped) between. A stream's
    coroutine then wakes a few times a response instead of once a token; the tokens' stamps
    are the reads' (``read_stamps``) either way. None where the connection does not stamp."""
    import aiohttp

    body = resp.content
    protocol: Any = getattr(resp, "_protocol", None)
    if not hasattr(protocol, "of") or not hasattr(body, "_eof_waiter"):
        return None

    failed: list[BaseException] = []  # the body's error, raised once what came before it is taken

    async def batch(limit: int) -> bytes:
        if not failed:
            try:
                if not body.is_eof() and body._size < BATCH_BYTES and not protocol._reading_paused:
                    await body.wait_eof()  # or the protocol's wake-up (above)
                else:
                    await asyncio.sleep(0)
                return body.read_nowait(limit)
            except (aiohttp.ClientError, TimeoutError) as exc:  # a timeout, a cut, a reset
                failed.append(exc)
        if body._size:  # read before it failed: a stream keeps the tokens it read
            return body._read_nowait(limit)
        raise failed[0]

    return batch


def _ssl_context(spec: Any, base_dir: Path) -> ssl.SSLContext | bool:
    if not spec.verify_tls:
        return False
    if spec.ca_bundle:
        path = Path(spec.ca_bundle).expanduser()
        return ssl.create_default_context(
            cafile=str(path if path.is_absolute() else base_dir / path)
        )
    return True


class Wire:
    """Per-request stamps from the tracing hooks: when the request started in the client and
    when its bytes left (with the thread's CPU time at both), and its waits on the way: for a
    pooled connection (``queued_ns``) and for a new one (``connect_ns``)."""

    __slots__ = (
        "connect_ns",
        "connect_start_ns",
        "cpu_sent_ns",
        "cpu_start_ns",
        "queue_start_ns",
        "queued_ns",
        "sent_ns",
        "start_ns",
    )

    def __init__(self) -> None:
        self.sent_ns = self.start_ns = self.cpu_start_ns = self.cpu_sent_ns = 0
        self.queue_start_ns = self.queued_ns = 0
        self.connect_start_ns = self.connect_ns = 0

    def sent(self) -> Sent:
        """The send, and where the client's part of its lateness went: the thread was off the
        CPU for whatever of the elapsed time it neither ran nor waited on the network for."""
        elapsed = max(0, self.sent_ns - self.start_ns)
        waited = self.queued_ns + self.connect_ns
        off_cpu = elapsed - (self.cpu_sent_ns - self.cpu_start_ns) - waited
        return Sent(
            self.sent_ns,
            pool_ns=self.queued_ns,
            connect_ns=self.connect_ns,
            off_cpu_ns=max(0, off_cpu),
        )


def _wire_trace(now: Callable[[], int]):
    """aiohttp tracing hooks: when a request's headers were written to the socket (the send, as
    near the wire as the client shows it) and how long it queued for a pooled connection (the
    client's own wait)."""
    import aiohttp

    trace = aiohttp.TraceConfig()
    cpu = time.thread_time_ns  # this thread's CPU time: what it ran, not what it waited

    async def started(session, ctx, params) -> None:
        w = ctx.trace_request_ctx
        w.start_ns, w.cpu_start_ns = now(), cpu()

    async def headers_sent(session, ctx, params) -> None:
        w = ctx.trace_request_ctx
        w.sent_ns, w.cpu_sent_ns = now(), cpu()

    async def queued(session, ctx, params) -> None:
        ctx.trace_request_ctx.queue_start_ns = now()

    async def dequeued(session, ctx, params) -> None:
        w = ctx.trace_request_ctx
        w.queued_ns += now() - w.queue_start_ns

    async def connecting(session, ctx, params) -> None:
        ctx.trace_request_ctx.connect_start_ns = now()

    async def connected(session, ctx, params) -> None:
        w = ctx.trace_request_ctx
        w.connect_ns += now() - w.connect_start_ns

    trace.on_request_start.append(started)
    trace.on_request_headers_sent.append(headers_sent)
    trace.on_connection_queued_start.append(queued)
    trace.on_connection_queued_end.append(dequeued)
    trace.on_connection_create_start.append(connecting)
    trace.on_connection_create_end.append(connected)
    return trace


def failure_kind(exc: BaseException) -> tuple[str, bool]:
    """A failed request's error type for the result, and whether it failed to connect (the
    server may be down) rather than after connecting (the stream so far is kept)."""
    import aiohttp

    if isinstance(exc, aiohttp.ClientConnectorCertificateError):  # TLS verification
        return "tls_error", True
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connect_error", True
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "connect_timeout", True
    for kind, name in (
        (aiohttp.SocketTimeoutError, "read_timeout"),  # silent past read_timeout
        (aiohttp.ServerDisconnectedError, "server_disconnected"),
        (aiohttp.ClientPayloadError, "stream_cut"),  # a chunked body cut short mid-stream
        (aiohttp.ClientOSError, "connection_reset"),  # reset by the peer, mid-request
    ):
        if isinstance(exc, kind):
            return name, False
    return type(exc).__name__, False


async def error_text(resp: Any, limit: int = 4096) -> str:
    """The start of an error body (never the whole of a hostile one), as text."""
    try:
        raw = await resp.content.read(limit)
    except Exception:  # the body is only for the message
        return ""
    return raw.decode("utf-8", errors="replace")[:ERROR_TEXT_CHARS]


async def profiler_call(session: Any, root: str, name: str) -> str | None:
    """POST ``/<name>`` at the server's root (vLLM's ``/start_profile``, ``/stop_profile``);
    None on success, else why not (the caller bounds how long it may take)."""
    import aiohttp

    try:
        async with session.post(
            f"{root}/{name}",
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
            trace_request_ctx=Wire(),
        ) as resp:
            if resp.status >= 400:
                hint = " (vLLM serves it when started with --profiler-config)"
                return f"POST /{name}: HTTP {resp.status}" + (hint if resp.status == 404 else "")
            await resp.content.read(1 << 16)  # an answer, not a body worth keeping
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"POST /{name}: {type(exc).__name__}"
    return None


async def server_token_count(session: Any, root: str, model: str, text: str) -> int | None:
    """How many tokens the server's own ``/tokenize`` (vLLM, SGLang) makes of ``text``, or
    None where it has none."""
    try:
        async with session.post(
            f"{root}/tokenize",
            data=json.dumps({"model": model, "prompt": text}),
            trace_request_ctx=Wire(),
        ) as resp:
            if resp.status >= 400:
                return None
            body = await resp.content.read(1 << 16)  # a count is a few bytes: bounded
        answer = outside.loads(body.decode("utf-8", "replace"))
    except Exception:  # no such endpoint, or not JSON: the server has no /tokenize
        return None
    count = answer.get("count") if isinstance(answer, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return None
    return count


async def served_models(session: Any, base: str) -> list[str] | None:
    """The model names the server lists at ``GET /models`` (under the API's base URL), or
    None where it lists none (no such endpoint, or not the OpenAI shape)."""
    try:
        async with session.get(f"{base.rstrip('/')}/models", trace_request_ctx=Wire()) as resp:
            if resp.status >= 400:
                return None
            body = await resp.content.read(1 << 20)  # a list of names: bounded
        answer = outside.loads(body.decode("utf-8", "replace"))
    except Exception:  # no such endpoint, or not JSON
        return None
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        return None
    return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
