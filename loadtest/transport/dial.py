"""Opening a connection for the pool (``pool.ConnectionPool``): to a Unix socket, or TCP to the
host or through a proxy's CONNECT tunnel, then for https TLS over it, its handshake timed apart;
and, for a TLS connection dropped before any answer, its cause heard on a second try."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import Callable

from loadtest.core.text import visible
from loadtest.transport.endpoint import Endpoint
from loadtest.transport.head import HEAD_END, MAX_HEAD_BYTES, read_head
from loadtest.transport.http1 import Connection, HttpFailure
from loadtest.transport.settings import ClientSettings
from loadtest.transport.tls import tls_failure
from loadtest.transport.wire import Wire

DIAGNOSIS_S = 1.0  # how long a dropped TLS connection's second try waits for the server's alert


class Dialer:
    """New connections to ``endpoint`` (through ``proxy``; TLS by ``ssl``), stamped on the
    request's ``wire`` by ``now``."""

    def __init__(
        self,
        endpoint: Endpoint,
        proxy: Endpoint | None,
        ssl_context: ssl.SSLContext | None,
        settings: ClientSettings,
        now: Callable[[], int],
    ) -> None:
        self.endpoint, self.proxy, self.ssl = endpoint, proxy, ssl_context
        self.settings, self.now = settings, now

    async def tls_diagnosis(self, failure: HttpFailure) -> HttpFailure:
        """Why a new TLS connection was dropped before any answer. Under TLS 1.3 a server
        judges the client's certificate after the handshake and sends its alert then; with a
        request already written the close is a reset, which discards the alert (and asyncio's
        TLS reads an alert as an end of stream). One more connection, blocking, with nothing
        written, hears it: within ``DIAGNOSIS_S`` a step, on a thread."""
        assert self.ssl is not None
        heard = await asyncio.to_thread(
            _hear_alert, self.endpoint, self.proxy, self.ssl, DIAGNOSIS_S
        )
        said = tls_failure(heard) if heard is not None else None
        if said is None:  # no alert (asyncio's servers, uvicorn's among them, send none)
            said = (
                "the server dropped the connection after the TLS handshake, before any answer: "
                + (
                    "does it refuse this client certificate (its CA unknown to the server, or "
                    "expired)?"
                    if self.settings.client_cert is not None
                    else "does it require a client certificate? (client_cert, client_key)"
                )
                + f" ({failure})"
            )
        return HttpFailure("tls_error", f"{self.endpoint.origin}: {said}", True)

    @property
    def via(self) -> str:
        """The origin, and the proxy a connection goes through (for messages)."""
        origin = self.endpoint.origin
        return origin if self.proxy is None else f"{origin} via {self.proxy.origin}"

    async def dial(self, protocol: Callable[[], Connection], wire: Wire | None) -> Connection:
        """A new connection: to the socket, the host, or the proxy; for https, TCP first (to
        the host, or a CONNECT tunnel through the proxy), then TLS over it, timed apart
        (``wire.tls_ns``)."""
        loop = asyncio.get_running_loop()
        e, proxy = self.endpoint, self.proxy
        if e.scheme == "unix":
            _, conn = await loop.create_unix_connection(protocol, e.socket_path)
            return conn
        if not e.tls:
            host, port = (e.host, e.port) if proxy is None else (proxy.host, proxy.port)
            _, conn = await loop.create_connection(protocol, host, port)
            return conn
        raw, placeholder = await loop.create_connection(
            asyncio.Protocol if proxy is None else _Tunnel,
            e.host if proxy is None else proxy.host,
            e.port if proxy is None else proxy.port,
        )
        try:
            if proxy is not None:
                await self._tunnel(raw, placeholder, proxy)  # type: ignore[arg-type]
            assert self.ssl is not None  # an https endpoint's
            start = self.now()
            tls = await loop.start_tls(raw, placeholder, self.ssl, server_hostname=e.host)
            if wire is not None:
                wire.tls_ns += self.now() - start
        except BaseException:
            raw.abort()
            raise
        assert tls is not None  # the upgraded transport (None only for a closing loop's)
        conn = protocol()
        tls.set_protocol(conn)
        conn.connection_made(tls)
        return conn

    async def _tunnel(self, raw: asyncio.Transport, tunnel: _Tunnel, proxy: Endpoint) -> None:
        """A CONNECT tunnel through ``proxy`` to the endpoint, over ``raw``."""
        raw.write(connect_request(self.endpoint, proxy))
        status, reason = await tunnel.answered
        if status != 200:
            raise HttpFailure(
                "proxy_error",
                f"{self.via}: the proxy refused the tunnel: HTTP {status} {reason}",
                True,
            )


def _hear_alert(
    e: Endpoint, proxy: Endpoint | None, ctx: ssl.SSLContext, timeout_s: float
) -> BaseException | None:
    """A blocking TLS connection to ``e`` (through ``proxy``'s tunnel) that writes nothing and
    reads once: the TLS error it meets (the server's alert), or None."""
    import socket

    try:
        raw = socket.create_connection(
            (e.host, e.port) if proxy is None else (proxy.host, proxy.port), timeout_s
        )
    except OSError:
        return None
    try:
        if proxy is not None:
            raw.sendall(connect_request(e, proxy))
            answer = b""
            while HEAD_END.search(answer) is None and len(answer) < MAX_HEAD_BYTES:
                piece = raw.recv(4096)
                if not piece:
                    return None
                answer += piece
            if answer.split(b" ", 2)[1:2] != [b"200"]:
                return None
        with ctx.wrap_socket(raw, server_hostname=e.host) as tls:
            tls.settimeout(timeout_s)
            tls.recv(1)
    except (ssl.SSLError, ssl.CertificateError) as exc:
        return exc
    except OSError:
        return None
    finally:
        raw.close()
    return None


def connect_request(e: Endpoint, proxy: Endpoint) -> bytes:
    """The request that asks ``proxy`` for a tunnel to ``e`` (with the proxy's own login)."""
    lines = {"Host": e.authority, **proxy_authorization(proxy)}
    head = "".join(f"{k}: {v}\r\n" for k, v in lines.items())
    return f"CONNECT {e.authority} HTTP/1.1\r\n{head}\r\n".encode()


def proxy_authorization(proxy: Endpoint) -> dict[str, str]:
    """The proxy's own credentials (``http://user:pw@proxy:3128``), as Basic auth."""
    if proxy.username is None and proxy.password is None:
        return {}
    pair = f"{proxy.username or ''}:{proxy.password or ''}".encode()
    return {"Proxy-Authorization": f"Basic {base64.b64encode(pair).decode()}"}


class _Tunnel(asyncio.Protocol):
    """A connection to a proxy until its answer to CONNECT: ``answered`` gets its status."""

    def __init__(self) -> None:
        self.answered: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()
        self.head = b""

    def data_received(self, data: bytes) -> None:
        if self.answered.done():
            return
        self.head += data
        found = HEAD_END.search(self.head)
        if found is None:
            if len(self.head) > MAX_HEAD_BYTES:
                self.answered.set_exception(HttpFailure("proxy_error", "no proxy's answer", True))
            return
        if found.end() != len(self.head):  # bytes past the answer: none may come before TLS
            self.answered.set_exception(
                HttpFailure("proxy_error", "the proxy sent bytes past its answer to CONNECT", True)
            )
            return
        try:
            got = read_head(self.head[: found.start()])
        except ValueError as exc:
            self.answered.set_exception(HttpFailure("proxy_error", f"the proxy: {exc}", True))
            return
        line = self.head.split(b"\n", 1)[0].decode("latin-1").strip()
        reason = line.split(" ", 2)[2] if line.count(" ") >= 2 else ""  # HTTP/1.1 403 Forbidden
        self.answered.set_result((got.status, visible(reason[:80])))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answered.done():
            self.answered.set_exception(
                HttpFailure(
                    "proxy_error", "the proxy closed the connection before its answer", True
                )
            )
