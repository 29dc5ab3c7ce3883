"""A pool of kept-alive HTTP/1.1 connections (``http1``) to one origin, under one
``ClientSettings``, and the stamps it takes of each request on the way (``Wire``): its start,
when its bytes left, its waits for a connection. A request whose kept-alive connection the
server had closed before any byte of it was written is sent on a new one; once written, a
request is never sent again: the server may have done its work."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Callable

from loadtest.core import open_files
from loadtest.core._version import __version__
from loadtest.transport.dial import Dialer, proxy_authorization
from loadtest.transport.endpoint import Endpoint
from loadtest.transport.http1 import Connection, HttpFailure, Response
from loadtest.transport.settings import ClientSettings
from loadtest.transport.tls import tls_failure
from loadtest.transport.wire import Wire

# How a fresh connection closed unanswered fails: under TLS, a handshake refused late
STALE = frozenset({"server_disconnected", "connection_reset"})
# Once the server was seen closing a connection idle for T, one idle for this share of T or
# more is closed by the client rather than reused: a request written as the server's close
# crosses it cannot be sent again (the server may have read it), so that race is kept away
REUSE_SHARE_OF_SERVER_IDLE = 0.8
CLIENT_OUT_OF_FILES = "client_out_of_files"  # an error type that is the client's, not the server's


class ConnectionPool:
    """The connections to one origin (scheme, host and port, or a Unix socket), kept alive,
    under one ``ClientSettings`` (TLS, proxy, headers, timeouts): at most
    ``max_connections`` open (0: unbounded), waited for in turn. Each request is stamped on
    its ``wire`` (``connection.Wire``): its start, when its bytes left, its waits for a
    connection."""

    def __init__(
        self,
        url: str,
        settings: ClientSettings,
        max_connections: int,
        now: Callable[[], int],
    ) -> None:
        self.endpoint = endpoint = Endpoint.parse(url)
        self.settings = settings
        self.ssl = settings.ssl_context() if endpoint.tls else None
        self.proxy = settings.proxy_for(endpoint)
        self.dialer = Dialer(endpoint, self.proxy, self.ssl, settings, now)
        self.origin = endpoint.origin
        lines = {
            "Host": endpoint.host_header,
            "User-Agent": f"loadtest/{__version__}",
            "Accept": "*/*",
            "Accept-Encoding": "identity",
            **settings.headers_for(endpoint),
        }
        if self.proxy is not None and not endpoint.tls:  # an absolute-form request: to the proxy
            lines.update(proxy_authorization(self.proxy))
        for name, value in lines.items():
            if any(c in f"{name}{value}" for c in "\r\n"):
                raise ValueError(f"header {name!r}: a line break in a header")
        self._head = "".join(f"{k}: {v}\r\n" for k, v in lines.items()).encode()
        self._targets: dict[str, bytes] = {}  # URL -> the request line's target
        self.limit = max_connections
        self.connect_timeout = settings.connect_timeout_s
        self.read_timeout_ns = settings.read_timeout_ns
        self.now = now
        self._idle: list[Connection] = []
        self._open = 0  # connections counted against the limit: in use, idle or connecting
        self._waiters: deque[asyncio.Future] = deque()
        self._all: set[Connection] = set()
        # the shortest idle time after which the server was seen closing a kept-alive
        # connection (its keep-alive, learned; 0: not seen)
        self.server_idle_close_ns = 0

    async def request(
        self,
        method: str,
        url: str,
        body: bytes = b"",
        wire: Wire | None = None,
        eager: bool = False,
        read_timeout_ns: int | None = None,
        head: bytes = b"",
    ) -> Response:
        """Send ``method url`` with ``body`` (JSON, where there is one) and wait for the
        response's head. ``eager``: the body's batches come read by read (a request the plan
        may cancel takes what was read by then). ``read_timeout_ns``: this request's (0: none;
        None: the pool's). ``head``: this request's own header lines (each ending CRLF, free of
        other line breaks: the caller's to check)."""
        target = self._targets.get(url) or self._target(url)
        now, cpu = self.now, time.thread_time_ns
        if wire is not None:
            wire.start_ns, wire.cpu_start_ns = now(), cpu()
        conn, reused = await self._acquire(wire)
        if wire is not None:
            wire.connected_ns = now()
        length = b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        request = b"%s %s HTTP/1.1\r\n%s%s%s\r\n%s" % (
            method.encode(),
            target,
            self._head,
            head,
            length if body else b"",
            body,
        )
        timeout = self.read_timeout_ns if read_timeout_ns is None else read_timeout_ns
        try:
            return await conn.exchange(request, eager, timeout, wire, reused)
        except HttpFailure as exc:
            if exc.unsent:
                self._closed_idle(conn)
            if not reused and self.ssl is not None and exc.kind in STALE and conn.answered_nothing:
                raise await self.dialer.tls_diagnosis(exc) from None
            # A kept-alive connection the server had closed (its keep-alive ran out, or it
            # closes after every answer), found so before anything was written: the server
            # never had the request, so it goes on a new connection, its latency still from
            # its intended send. Once written, a lost connection is the server's failure: it
            # may have done the work, and a second send would do it twice.
            if not exc.unsent:
                raise
        if wire is not None:
            wire.retries += 1
        conn = await self._connect(wire)
        if wire is not None:
            wire.connected_ns = now()
        return await conn.exchange(request, eager, timeout, wire)

    def _target(self, url: str) -> bytes:
        endpoint = Endpoint.parse(url)
        if endpoint.origin != self.origin:
            raise ValueError(f"{endpoint.url}: not of this pool's origin, {self.origin}")
        # through a proxy, an http request names its whole URL (absolute form)
        target = endpoint.url if self.proxy is not None and not endpoint.tls else endpoint.path
        self._targets[url] = out = target.encode()
        return out

    async def close(self) -> None:
        for conn in list(self._all):
            if conn.transport is not None and not conn.lost:
                conn.transport.abort()
        self._idle.clear()
        await asyncio.sleep(0)  # the transports' connection_lost calls

    # -- the pool ---------------------------------------------------------------------------

    async def _acquire(self, wire: Wire | None) -> tuple[Connection, bool]:
        """A connection for a request, and whether it carried one before (kept alive)."""
        while True:
            while self._idle:
                conn = self._idle.pop()
                if conn.lost:
                    continue
                limit = self.server_idle_close_ns * REUSE_SHARE_OF_SERVER_IDLE
                if limit and self.now() - conn.idle_since_ns >= limit:
                    self.released(conn, keep=False)  # near the server's own keep-alive: closed
                    continue
                return conn, True
            if not self.limit or self._open < self.limit:
                return await self._connect(wire), False
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            start = self.now()
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken and leaving: the turn passes on
                raise
            finally:
                if wire is not None:
                    wire.queued_ns += self.now() - start

    async def _connect(self, wire: Wire | None) -> Connection:
        self._open += 1
        start = self.now()
        failure: HttpFailure
        try:
            dialing = self.dialer.dial(lambda: Connection(self), wire)
            conn = await asyncio.wait_for(dialing, self.connect_timeout or None)
        except asyncio.TimeoutError:
            failure = HttpFailure(
                "connect_timeout",
                f"{self.dialer.via}: no connection within {self.connect_timeout:g} s",
                True,
            )
        except HttpFailure as exc:  # the proxy refused the tunnel
            failure = exc
        except (ssl.SSLError, ssl.CertificateError) as exc:
            failure = HttpFailure("tls_error", f"{self.origin}: {tls_failure(exc) or exc}", True)
        except OSError as exc:
            if exc.errno in open_files.CLIENT_ERRNOS:  # the client's limit, not the server down
                failure = HttpFailure(
                    CLIENT_OUT_OF_FILES,
                    f"this client ran out of file descriptors ({exc.strerror}): raise ulimit -n",
                )
            else:
                failure = HttpFailure("connect_error", f"{self.dialer.via}: {exc}", True)
        except BaseException:
            self._open -= 1
            self._wake()
            raise
        else:
            if wire is not None:
                wire.connect_ns += self.now() - start
            self._all.add(conn)
            return conn
        if wire is not None:
            wire.connect_ns += self.now() - start
        self._open -= 1
        self._wake()
        raise failure

    def released(self, conn: Connection, keep: bool) -> None:
        """``conn``'s response is done with: kept for the next request, or closed."""
        if keep:
            conn.idle_since_ns = self.now()
            self._idle.append(conn)
            self._wake()
            return
        if not conn.lost and conn.transport is not None:
            conn.transport.close()
        self._drop(conn)

    def lost(self, conn: Connection) -> None:
        """``conn`` is gone (either side closed it)."""
        if conn.idle:  # an idle one the server closed (its keep-alive ran out)
            self._closed_idle(conn)
            self._drop(conn)

    def _closed_idle(self, conn: Connection) -> None:
        """The server closed ``conn`` while it was idle: its keep-alive is at most that long."""
        if conn.idle_since_ns and conn in self._all:
            idle = self.now() - conn.idle_since_ns
            if idle > 0 and (not self.server_idle_close_ns or idle < self.server_idle_close_ns):
                self.server_idle_close_ns = idle

    def _drop(self, conn: Connection) -> None:
        self._all.discard(conn)
        if conn.counted:
            conn.counted = False
            self._open -= 1
            self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
