"""The client's connections to its server: a pool of kept-alive HTTP/1.1 connections (``http1``)
to one origin, with the spec's headers, TLS, limit and timeouts; the wire stamps of each
request; and the small calls beside the requests (the server's profiler, its ``/tokenize``,
its ``/models``)."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loadtest.backends.openai.http1 import Connection, HttpFailure, Response
from loadtest.core import open_files, outside
from loadtest.core._version import __version__
from loadtest.core.events import Sent

ERROR_TEXT_CHARS = 300  # of an error body or exception message kept for the result
# How a send onto a kept-alive connection the server had already closed fails, before any byte
# of an answer: such a request is sent again, once, on a new connection.
STALE = frozenset({"server_disconnected", "connection_reset"})
CLIENT_OUT_OF_FILES = "client_out_of_files"  # an error type that is the client's, not the server's


def open_pool(
    spec: Any, url: str, headers: dict[str, str], base_dir: Path, now: Callable[[], int]
) -> ConnectionPool:
    """The client's connections to ``url``'s server: at most ``max_connections`` (0:
    unbounded), the spec's timeouts and TLS settings, its stamps on ``now``."""
    return ConnectionPool(
        url,
        headers,
        _ssl_context(spec, base_dir),
        spec.max_connections,
        spec.connect_timeout,
        spec.read_timeout,
        now,
    )


class ConnectionPool:
    """The connections to one origin (scheme, host, port), kept alive: at most
    ``max_connections`` open (0: unbounded), waited for in turn. Each request is stamped on
    its ``wire`` (``connection.Wire``): its start, when its bytes left, its waits for a
    connection."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        ssl_context: ssl.SSLContext | bool,
        max_connections: int,
        connect_timeout_ns: int,
        read_timeout_ns: int,
        now: Callable[[], int],
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"{url}: not an http(s) URL")
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = None
        if parts.scheme == "https":
            if isinstance(ssl_context, ssl.SSLContext):
                self.ssl = ssl_context
            else:
                self.ssl = ssl.create_default_context()
                if not ssl_context:  # verify_tls: false
                    self.ssl.check_hostname = False
                    self.ssl.verify_mode = ssl.CERT_NONE
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.origin = f"{parts.scheme}://{host}:{self.port}"
        lines = {
            "Host": host if parts.port is None else f"{host}:{self.port}",
            "User-Agent": f"loadtest/{__version__}",
            "Accept": "*/*",
            "Accept-Encoding": "identity",
            **headers,
        }
        for name, value in lines.items():
            if any(c in f"{name}{value}" for c in "\r\n"):
                raise ValueError(f"header {name!r}: a line break in a header")
        self._head = "".join(f"{k}: {v}\r\n" for k, v in lines.items()).encode()
        self._targets: dict[str, bytes] = {}  # URL -> the request line's target
        self.limit = max_connections
        self.connect_timeout = connect_timeout_ns / 1e9
        self.read_timeout_ns = read_timeout_ns
        self.now = now
        self._idle: list[Connection] = []
        self._open = 0  # connections counted against the limit: in use, idle or connecting
        self._waiters: deque[asyncio.Future] = deque()
        self._all: set[Connection] = set()

    async def request(
        self,
        method: str,
        url: str,
        body: bytes = b"",
        wire: Any = None,
        eager: bool = False,
        read_timeout_ns: int | None = None,
    ) -> Response:
        """Send ``method url`` with ``body`` (JSON, where there is one) and wait for the
        response's head. ``eager``: the body's batches come read by read (a request the plan
        may cancel takes what was read by then). ``read_timeout_ns``: this request's (0: none;
        None: the pool's)."""
        target = self._targets.get(url) or self._target(url)
        now, cpu = self.now, time.thread_time_ns
        if wire is not None:
            wire.start_ns, wire.cpu_start_ns = now(), cpu()
        conn, reused = await self._acquire(wire)
        length = b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        request = b"%s %s HTTP/1.1\r\n%s%s\r\n%s" % (
            method.encode(),
            target,
            self._head,
            length if body else b"",
            body,
        )
        timeout = self.read_timeout_ns if read_timeout_ns is None else read_timeout_ns
        try:
            return await conn.exchange(request, eager, timeout, wire)
        except HttpFailure as exc:
            # A kept-alive connection the server closed as this request went onto it (its
            # keep-alive ran out, or it closes after every answer): the server never saw the
            # request, so it is the client's to send again, once, on a new connection. The
            # request's latency still runs from its intended send.
            if not (reused and exc.kind in STALE and conn.answered_nothing):
                raise
        if wire is not None:
            wire.retries += 1
        conn = await self._connect(wire)
        return await conn.exchange(request, eager, timeout, wire)

    def _target(self, url: str) -> bytes:
        parts = urlsplit(url)
        host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if f"{parts.scheme}://{host}:{port}" != self.origin:
            raise ValueError(f"{url}: not of this pool's origin, {self.origin}")
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._targets[url] = out = target.encode()
        return out

    async def close(self) -> None:
        for conn in list(self._all):
            if conn.transport is not None and not conn.lost:
                conn.transport.abort()
        self._idle.clear()
        await asyncio.sleep(0)  # the transports' connection_lost calls

    # -- the pool ---------------------------------------------------------------------------

    async def _acquire(self, wire: Any) -> tuple[Connection, bool]:
        """A connection for a request, and whether it carried one before (kept alive)."""
        while True:
            while self._idle:
                conn = self._idle.pop()
                if not conn.lost:
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

    async def _connect(self, wire: Any) -> Connection:
        self._open += 1
        start = self.now()
        loop = asyncio.get_running_loop()
        failure: HttpFailure
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: Connection(self),
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl else None,
                ),
                self.connect_timeout or None,
            )
        except asyncio.TimeoutError:
            failure = HttpFailure(
                "connect_timeout",
                f"{self.origin}: no connection within {self.connect_timeout:g} s",
                True,
            )
        except ssl.SSLCertVerificationError as exc:
            failure = HttpFailure("tls_error", f"{self.origin}: {exc}", True)
        except OSError as exc:
            if exc.errno in open_files.CLIENT_ERRNOS:  # the client's limit, not the server down
                failure = HttpFailure(
                    CLIENT_OUT_OF_FILES,
                    f"this client ran out of file descriptors ({exc.strerror}): raise ulimit -n",
                )
            else:
                failure = HttpFailure("connect_error", f"{self.origin}: {exc}", True)
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
            self._idle.append(conn)
            self._wake()
            return
        if not conn.lost and conn.transport is not None:
            conn.transport.close()
        self._drop(conn)

    def lost(self, conn: Connection) -> None:
        """``conn`` is gone (either side closed it)."""
        if conn.idle:  # an idle one the server closed (its keep-alive ran out)
            self._drop(conn)

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
    """A request's stamps, as the pool takes them: when it started in the client and when its
    bytes left (with the thread's CPU time at both), and its waits on the way: for a pooled
    connection (``queued_ns``) and for a new one (``connect_ns``)."""

    __slots__ = (
        "connect_ns",
        "cpu_sent_ns",
        "cpu_start_ns",
        "queued_ns",
        "retries",
        "sent_ns",
        "start_ns",
    )

    def __init__(self) -> None:
        self.sent_ns = self.start_ns = self.cpu_start_ns = self.cpu_sent_ns = 0
        self.queued_ns = self.connect_ns = self.retries = 0

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
            retries=self.retries,
        )


async def error_text(resp: Any) -> str:
    """The start of an error body (never the whole of a hostile one), as text; for a redirect,
    where to (redirects are not followed: the base URL should say where the API is)."""
    if 300 <= resp.status < 400:
        where = resp.headers.get("location", "?")[:200]
        return f"redirected to {where!r}, not followed: point base_url there"
    return (await resp.text(4096))[:ERROR_TEXT_CHARS]


async def fetch(
    pool: ConnectionPool,
    method: str,
    url: str,
    body: bytes = b"",
    limit: int = 1 << 16,
    read_timeout_ns: int | None = None,
) -> tuple[int, bytes]:
    """One small call beside the requests: its status and its body's first ``limit`` bytes
    (bounded: a call's answer is a few bytes; a longer one is cut there)."""
    resp = await pool.request(method, url, body, read_timeout_ns=read_timeout_ns)
    try:
        return resp.status, await resp.read(limit)
    finally:
        resp.release()


async def profiler_call(pool: ConnectionPool, root: str, name: str) -> str | None:
    """POST ``/<name>`` at the server's root (vLLM's ``/start_profile``, ``/stop_profile``);
    None on success, else why not. No read timeout: a server writes its traces before it
    answers, and the caller bounds how long that may take."""
    try:
        status, _ = await fetch(pool, "POST", f"{root}/{name}", read_timeout_ns=0)
    except HttpFailure as exc:
        return f"POST /{name}: {exc.kind}"
    if status >= 400:
        hint = " (vLLM serves it when started with --profiler-config)"
        return f"POST /{name}: HTTP {status}" + (hint if status == 404 else "")
    return None


async def server_token_count(pool: ConnectionPool, root: str, model: str, text: str) -> int | None:
    """How many tokens the server's own ``/tokenize`` (vLLM, SGLang) makes of ``text``, or
    None where it has none."""
    try:
        body = json.dumps({"model": model, "prompt": text}).encode()
        status, raw = await fetch(pool, "POST", f"{root}/tokenize", body)
        if status >= 400:
            return None
        answer = outside.loads(raw.decode("utf-8", "replace"))
    except Exception:  # no such endpoint, or not JSON: the server has no /tokenize
        return None
    count = answer.get("count") if isinstance(answer, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return None
    return count


async def served_models(pool: ConnectionPool, base: str) -> list[str] | None:
    """The model names the server lists at ``GET /models`` (under the API's base URL), or
    None where it lists none (no such endpoint, or not the OpenAI shape)."""
    try:
        status, raw = await fetch(pool, "GET", f"{base.rstrip('/')}/models", limit=1 << 20)
        if status >= 400:
            return None
        answer = outside.loads(raw.decode("utf-8", "replace"))
    except Exception:  # no such endpoint, or not JSON
        return None
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        return None
    return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
