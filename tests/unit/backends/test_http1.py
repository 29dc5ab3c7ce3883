"""loadtest's own HTTP/1.1 client (``http1``): a response's framing taken off reads cut anywhere,
each read stamped with the body's bytes by then; the heads and bodies it refuses, by name; and
over real sockets, the pool (kept-alive connections, the limit and its waits, connections the
server closes), connect failures, TLS, and a client that leaves mid-stream."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.transport import http1
from loadtest.transport.http1 import HttpFailure
from loadtest.transport.pool import ConnectionPool
from loadtest.transport.settings import ClientSettings
from loadtest.transport.wire import Wire


class FakeTransport:
    def __init__(self) -> None:
        self.closed = self.aborted = self.paused = False
        self.written = b""

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def get_extra_info(self, name: str) -> None:
        return None

    def is_closing(self) -> bool:
        return self.closed or self.aborted


def _connection(clock) -> http1.Connection:
    pool = ConnectionPool("http://127.0.0.1:9/", ClientSettings(read_timeout_ns=0), 0, clock)
    conn = http1.Connection(pool)
    conn.connection_made(FakeTransport())
    conn._reset(http1.BATCH_BYTES)
    conn.state = http1._HEAD
    return conn


def _feed(raw: bytes, cuts: list[int]) -> tuple[http1.Connection, list[tuple[int, int]]]:
    """``raw`` fed as reads cut at ``cuts``, read k stamped 1000 * (k + 1); the connection,
    and each read's raw span."""
    points = sorted({min(c, len(raw)) for c in cuts})
    spans = [(a, b) for a, b in zip([0, *points], [*points, len(raw)]) if b > a]
    clock_at = [0]
    conn = _connection(lambda: clock_at[0])
    for k, (a, b) in enumerate(spans):
        clock_at[0] = 1000 * (k + 1)
        conn.data_received(raw[a:b])
    return conn, spans


_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


@st.composite
def _bodies(draw):
    """A body, framed one of the three ways, with the raw offsets of each of its bytes and
    where each chunk's framing and data begin (a server's writes: one read each, most often).
    A piece may itself look like a whole chunk: read from its start, it is data all the same."""
    chunk_like = st.binary(min_size=1, max_size=20).map(lambda q: b"%x\r\n%s\r\n" % (len(q), q))
    pieces = draw(st.lists(st.one_of(st.binary(min_size=1, max_size=40), chunk_like), max_size=12))
    body = b"".join(pieces)
    framing = draw(st.sampled_from(["chunked", "length", "close"]))
    if framing == "chunked":
        raw, where = _HEAD + b"Transfer-Encoding: chunked\r\n\r\n", []
        bounds = []
        for p in pieces:
            bounds.append(len(raw))
            ext = draw(st.sampled_from([b"", b"", b";name=value", b" ;x"]))
            size = draw(st.sampled_from([b"%x", b"%X", b"%04x"])) % len(p)
            raw += b"%s%s\r\n" % (size, ext)
            bounds.append(len(raw))
            where += range(len(raw), len(raw) + len(p))
            raw += p + b"\r\n"
        bounds.append(len(raw))
        raw += b"0\r\n" + draw(st.sampled_from([b"", b"X-Trailer: 1\r\n"])) + b"\r\n"
    elif framing == "length":
        raw = _HEAD + b"Content-Length: %d\r\n\r\n" % len(body)
        where = list(range(len(raw), len(raw) + len(body)))
        raw += body
        bounds = []
    else:
        raw = _HEAD + b"\r\n"
        where = list(range(len(raw), len(raw) + len(body)))
        raw += body
        bounds = []
    return framing, body, raw, where, bounds


@settings(max_examples=300, deadline=None)
@given(_bodies(), st.lists(st.integers(0, 800), max_size=10), st.booleans())
def test_any_body_cut_into_any_reads_is_the_body_each_read_stamped_with_its_bytes(
    framed, cuts, by_chunk
):
    """Cut anywhere, or (``by_chunk``) also wherever a chunk begins, as a server's writes
    arrive (the reads that are one whole chunk each take the short path)."""
    framing, body, raw, where, bounds = framed
    conn, spans = _feed(raw, cuts + bounds if by_chunk else cuts)
    if framing == "close":  # its end is the connection's
        conn.connection_lost(None)
    assert conn.error is None and conn.status == 200
    assert conn.state == http1._DONE
    assert bytes(conn.buf) == body
    assert conn.reusable == (framing != "close")
    # by hand: every read that brought body bytes, with the body's bytes by its end
    expected, total = [], 0
    for k, (a, b) in enumerate(spans):
        got = sum(1 for w in where if a <= w < b)
        if got:
            total += got
            expected.append((1000 * (k + 1), total))
    assert list(zip(conn.read_ns, conn.read_ends)) == expected


def test_bytes_past_the_body_make_the_connection_not_reusable():
    conn, _ = _feed(_HEAD + b"Content-Length: 2\r\n\r\nokEXTRA", [])
    assert bytes(conn.buf) == b"ok" and conn.state == http1._DONE and not conn.reusable


def test_an_interim_answer_is_passed_over_and_a_204_has_no_body():
    conn, _ = _feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", [30])
    assert conn.status == 204 and conn.state == http1._DONE and conn.reusable


def test_any_number_of_interim_answers_is_passed_over_without_recursion_up_to_a_bound():
    # 100 interim heads in one read, then the answer: passed over in a loop
    conn, _ = _feed(b"HTTP/1.1 100 Continue\r\n\r\n" * 100 + b"HTTP/1.1 204 No\r\n\r\n", [])
    assert conn.status == 204 and conn.error is None
    # 20,000 of them: no server's answer (no RecursionError either), and no endless wait
    conn, _ = _feed(b"HTTP/1.1 100 Continue\r\n\r\n" * 20_000, [])
    assert conn.error is not None and conn.error.kind == "bad_http"
    assert "more than 100 interim answers" in str(conn.error)


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",  # bare LF throughout
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nok",  # mixed
        b"HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\nContent-Length: 2\n\nok",
    ],
)
def test_a_head_whose_lines_end_in_a_bare_lf_is_read_at_once(raw):
    conn, _ = _feed(raw, [])
    assert conn.status == 200 and conn.headers == {"content-length": "2"}
    assert bytes(conn.buf) == b"ok" and conn.state == http1._DONE


def test_a_server_that_speaks_first_fails_the_request_sent_to_it_by_what_it_said():
    # an SSH server's banner arrives before any request: the connection is closed, and the
    # request then sent on it fails naming the banner (never a write on a closed transport)
    pool = ConnectionPool(
        "http://127.0.0.1:9/", ClientSettings(read_timeout_ns=0), 0, time.monotonic_ns
    )
    conn = http1.Connection(pool)
    conn.connection_made(FakeTransport())
    conn.data_received(b"SSH-2.0-OpenSSH_9.6\r\n")
    assert conn.transport.closed and not conn.reusable

    async def send():
        await conn.exchange(b"GET / HTTP/1.1\r\n\r\n", False, 0)

    with pytest.raises(HttpFailure) as failed:
        asyncio.run(send())
    assert failed.value.kind == "bad_http" and "SSH-2.0-OpenSSH_9.6" in str(failed.value)
    assert conn.transport.written == b""  # nothing was written to it


def test_connection_close_and_http_1_0_are_not_kept():
    conn, _ = _feed(_HEAD + b"Connection: close\r\nContent-Length: 0\r\n\r\n", [])
    assert conn.state == http1._DONE and not conn.reusable
    conn, _ = _feed(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", [])
    assert conn.state == http1._DONE and not conn.reusable


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP status line"),
        (b"HTTP/2 200 OK\r\n\r\n", "not an HTTP/1 status line"),
        (_HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", "a chunk size that is no number"),
        (_HEAD + b"Content-Length: many\r\n\r\n", "a Content-Length that is no length"),
        (_HEAD + b"Content-Length: -5\r\n\r\nabc", "a Content-Length that is no length"),
        (_HEAD + b"Content-Encoding: gzip\r\nContent-Length: 3\r\n\r\n", "compressed the stream"),
        (_HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n", "compressed the stream"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 12000, "a response head past 64 KiB"),
        (_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * 5000, "a chunk line past 4 KiB"),
    ],
)
def test_what_is_no_http_response_fails_as_bad_http_and_closes_the_connection(raw, says):
    conn, _ = _feed(raw, [])
    assert conn.error is not None and conn.error.kind == "bad_http", conn.error
    assert says in str(conn.error)
    assert conn.transport.aborted and not conn.reusable


@pytest.mark.parametrize(
    ("state_raw", "kind"),
    [
        (b"", "server_disconnected"),  # nothing came back
        (_HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nab", "stream_cut"),
        (_HEAD + b"Content-Length: 10\r\n\r\nab", "stream_cut"),
    ],
)
def test_a_connection_lost_early_is_named_for_where_it_was(state_raw, kind):
    conn, _ = _feed(state_raw, [])
    conn.connection_lost(None)
    assert conn.error is not None and conn.error.kind == kind


def test_a_header_with_a_line_break_is_refused():
    with pytest.raises(ValueError, match="line break"):
        settings = ClientSettings(headers={"X": "a\r\nInjected: 1"}, origin="http://h:80")
        ConnectionPool("http://h/", settings, 0, time.monotonic_ns)


# -- over real sockets ----------------------------------------------------------------------


class Server:
    """A keep-alive HTTP server on loopback answering every request with ``body`` (after
    ``delay_s``), counting connections and requests; ``close_after``: it closes each
    connection after that many answers."""

    def __init__(
        self, body: bytes = b"{}", delay_s: float = 0.0, close_after: int = 0, drop_next=False
    ) -> None:
        """``drop_next``: after ``close_after`` answers a connection is closed when the next
        request comes on it, unanswered (a keep-alive that ran out as the request went)."""
        self.body, self.delay_s, self.close_after = body, delay_s, close_after
        self.drop_next = drop_next
        self.connections = self.requests = 0
        self.left: list[float] = []  # when each connection's client went away

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if self.drop_next and answered >= self.close_after:
                    break  # closed, the request unread
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                self.requests += 1
                await asyncio.sleep(self.delay_s)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(self.body), self.body)
                )
                await writer.drain()
                answered += 1
                if self.close_after and answered >= self.close_after and not self.drop_next:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            self.left.append(time.monotonic())
        writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/x"

    async def __aexit__(self, *exc) -> None:
        self.server.close()


def _pool(url: str, limit: int = 0, **tls) -> ConnectionPool:
    settings = ClientSettings(connect_timeout_s=2.0, read_timeout_ns=5 * 10**9, **tls)
    return ConnectionPool(url, settings, limit, time.monotonic_ns)


async def _get(pool: ConnectionPool, url: str, wire: Wire | None = None) -> bytes:
    resp = await pool.request("POST", url, b"{}", wire)
    try:
        assert resp.status == 200
        return await resp.read(1 << 16)
    finally:
        resp.release()


def test_requests_one_after_another_share_one_kept_alive_connection():
    async def main():
        server = Server(b"hello")
        async with server as url:
            pool = _pool(url)
            answers = [await _get(pool, url) for _ in range(3)]
            await pool.close()
        return answers, server

    answers, server = asyncio.run(main())
    assert answers == [b"hello"] * 3 and server.connections == 1 and server.requests == 3


def test_at_the_connection_limit_a_request_waits_its_turn_and_the_wait_is_stamped():
    async def main():
        server = Server(delay_s=0.2)
        async with server as url:
            pool = _pool(url, limit=1)
            wires = [Wire(), Wire()]
            await asyncio.gather(*(_get(pool, url, w) for w in wires))
            await pool.close()
        return wires, server

    wires, server = asyncio.run(main())
    assert server.connections == 1 and server.requests == 2
    waits = sorted(w.queued_ns for w in wires)
    assert waits[0] == 0 and waits[1] >= 0.1e9  # the second waited out most of the first


def test_a_connection_the_server_closes_is_not_used_again():
    async def main():
        server = Server(close_after=1)
        async with server as url:
            pool = _pool(url)
            for _ in range(3):
                await _get(pool, url)
                await asyncio.sleep(0.05)  # the server's close arrives
            await pool.close()
        return server

    server = asyncio.run(main())
    assert server.connections == 3 and server.requests == 3


class ThreadServer:
    """A server in a thread of its own (so its close reaches the kernel while the client's
    loop is busy): each connection answers its first request, then for the next one either
    closes before it comes (``then="close"``) or reads it, works ``work_s`` and drops the
    connection unanswered (``then="drop"``). Counts connections and requests received."""

    def __init__(self, then: str, work_s: float = 0.0) -> None:
        import socket
        import threading

        self.then, self.work_s = then, work_s
        self.connections = self.received = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1/x"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn) -> None:
        if self.then == "keepalive":
            return self._keep_alive(conn)
        with conn:
            for k in range(2):
                if k and self.then == "close":
                    time.sleep(0.05)  # after the answer was read: the connection idle
                    return  # the kept-alive connection closed
                seen = b""
                while b"\r\n\r\n" not in seen or not seen.endswith(b"{}"):
                    got = conn.recv(65536)
                    if not got:
                        return
                    seen += got
                self.received += 1
                if k:  # "drop": the request read, worked on, the connection dropped
                    time.sleep(self.work_s)
                    return
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    def _keep_alive(self, conn) -> None:
        """Every request answered; a connection idle for ``work_s`` closed (a keep-alive)."""

        conn.settimeout(self.work_s)
        with conn:
            while True:
                seen = b""
                try:
                    while b"\r\n\r\n" not in seen or not seen.endswith(b"{}"):
                        got = conn.recv(65536)
                        if not got:
                            return
                        seen += got
                except TimeoutError:
                    return  # idle too long: closed
                self.received += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    def close(self) -> None:
        self.sock.close()


def test_a_connection_idle_near_the_servers_learned_keep_alive_is_not_reused():
    """Seen closing a connection idle 0.2 s, the server's keep-alive is learned: one idle past
    80% of it is closed by the client and the request goes on a new one (never onto the
    server's close, where it could not be sent again); one idle less is reused."""
    server = ThreadServer("keepalive", work_s=0.2)

    async def main():
        pool = _pool(server.url)
        await _get(pool, server.url)
        await asyncio.sleep(0.35)  # the server closes it at 0.2 s; the loop sees it
        learned = pool.server_idle_close_ns / 1e9
        await _get(pool, server.url)  # a new connection
        await asyncio.sleep(0.85 * learned)  # past 80% of what was learned: not reused
        await _get(pool, server.url)
        await asyncio.sleep(0.02)  # well inside: reused
        await _get(pool, server.url)
        await pool.close()
        return learned

    try:
        learned = asyncio.run(main())
    finally:
        server.close()
    assert 0.19 <= learned <= 0.5  # the close, as the loop read it
    assert server.received == 4 and server.connections == 3


def test_a_kept_alive_connection_found_closed_before_the_write_is_replaced_not_resent():
    """The server closed the idle connection; the client's loop has not read its close yet
    (it is busy), but the kernel knows: nothing is written onto it, and the request goes once,
    on a new connection."""
    server = ThreadServer("close")

    async def main():
        pool = _pool(server.url)
        first, second = Wire(), Wire()
        await _get(pool, server.url, first)
        time.sleep(0.2)  # the loop busy: the server's close is in the kernel, unread
        answer = await _get(pool, server.url, second)
        await pool.close()
        return answer, first, second

    try:
        answer, first, second = asyncio.run(main())
    finally:
        server.close()
    assert answer == b"ok" and (first.retries, second.retries) == (0, 1)
    assert server.received == 2 and server.connections == 2  # each request had once


@pytest.mark.parametrize("work_s", [0.0, 0.3])
def test_a_request_written_onto_a_connection_the_server_then_drops_fails_and_is_never_resent(
    work_s,
):
    """Once written, the server may have the request (read, and perhaps worked on before it
    dropped the connection): a second send could do the work twice, so it is the server's
    failure, sent once."""
    server = ThreadServer("drop", work_s=work_s)

    async def main():
        pool = _pool(server.url)
        await _get(pool, server.url)
        wire = Wire()
        with pytest.raises(HttpFailure) as failed:
            await _get(pool, server.url, wire)
        await pool.close()
        return failed.value, wire

    try:
        failure, wire = asyncio.run(main())
    finally:
        server.close()
    assert failure.kind in ("server_disconnected", "connection_reset") and not failure.unsent
    assert wire.retries == 0 and server.received == 2 and server.connections == 1


def test_a_new_connection_closed_unanswered_fails_without_a_retry():
    # the server closes every connection at its first request: a fresh connection's failure is
    # the server's, not a stale one's, and is not sent again
    async def main():
        server = Server(close_after=0, drop_next=True)
        async with server as url:
            pool = _pool(url)
            wire = Wire()
            with pytest.raises(HttpFailure) as failed:
                await _get(pool, url, wire)
            await pool.close()
        return failed.value, wire, server

    failure, wire, server = asyncio.run(main())
    assert failure.kind in ("server_disconnected", "connection_reset") and not failure.connecting
    assert wire.retries == 0 and server.connections == 1 and server.requests == 0


def test_a_refused_connection_fails_as_connect_error_while_connecting():
    async def main():
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()  # nothing listens there now
        url = f"http://127.0.0.1:{port}/v1/x"
        pool = _pool(url)
        try:
            await _get(pool, url)
        except HttpFailure as exc:
            return exc, pool._open
        raise AssertionError("connected")

    exc, still_open = asyncio.run(main())
    assert exc.kind == "connect_error" and exc.connecting and still_open == 0


def test_a_client_that_leaves_mid_stream_closes_its_connection_and_the_server_sees_it():
    async def stream(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n")
        await writer.drain()
        gone = await reader.read(1)  # b"": the client closed
        seen.append(gone)
        writer.close()

    seen: list[bytes] = []

    async def main():
        server = await asyncio.start_server(stream, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/x"
        pool = _pool(url)
        resp = await pool.request("POST", url, b"{}", eager=True)
        assert await resp.batch(100) == b"hi"
        resp.close()
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.02)
        server.close()
        return pool._open

    assert asyncio.run(main()) == 0 and seen == [b""]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate with")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.mark.parametrize("trust", ["default", "ca_bundle", "unverified"])
def test_tls_verifies_the_server_against_what_is_trusted(certificate, trust):
    cert, key = certificate
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    trusted = {
        "default": {},  # the system's roots: a self-signed certificate is not among them
        "ca_bundle": {"ca_bundle": cert},
        "unverified": {"verify_tls": False},
    }[trust]

    async def main():
        server = Server(b"secret")
        listening = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=server_side)
        url = f"https://127.0.0.1:{listening.sockets[0].getsockname()[1]}/v1/x"
        pool = _pool(url, **trusted)
        try:
            return await _get(pool, url)
        except HttpFailure as exc:
            return exc
        finally:
            await pool.close()
            listening.close()

    got = asyncio.run(main())
    if trust == "default":
        assert isinstance(got, HttpFailure) and got.kind == "tls_error" and got.connecting
    else:
        assert got == b"secret"


def test_the_send_is_stamped_before_the_bytes_leave_whatever_holds_the_client_after(
    monkeypatch,
):
    """A write that wakes a server on the same host may hand it the client's core: here the
    client loses the core for 50 ms right after its write, while a server in another thread
    reads the request. The send's stamp is not after the server had the bytes."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    received: list[int] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"{}" not in data:
                data += conn.recv(4096)
            received.append(time.monotonic_ns())
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    threading.Thread(target=serve, daemon=True).start()
    real_write = asyncio.selector_events._SelectorSocketTransport.write

    def write_then_lose_the_core(self, data):
        real_write(self, data)
        time.sleep(0.05)  # blocks this thread: another one runs

    monkeypatch.setattr(
        asyncio.selector_events._SelectorSocketTransport, "write", write_then_lose_the_core
    )
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1/x"
    wire = Wire()

    async def main() -> bytes:
        pool = _pool(url)
        try:
            return await _get(pool, url, wire)
        finally:
            await pool.close()

    assert asyncio.run(main()) == b"ok"  # asyncio's own loop: its transport is the one held
    listener.close()
    assert wire.start_ns <= wire.sent_ns <= received[0]


def test_a_client_out_of_file_descriptors_says_so_and_is_not_a_server_that_is_down(monkeypatch):
    import errno

    async def main():
        loop = asyncio.get_running_loop()

        async def no_files(*args, **kwargs):
            raise OSError(errno.EMFILE, "Too many open files")

        monkeypatch.setattr(loop, "create_connection", no_files)
        pool = _pool("http://127.0.0.1:9/v1/x")
        with pytest.raises(HttpFailure) as failed:
            await pool.request("POST", "http://127.0.0.1:9/v1/x", b"{}")
        return failed.value, pool

    failure, pool = asyncio.run(main())
    assert failure.kind == "client_out_of_files" and "raise ulimit -n" in str(failure)
    assert not failure.connecting  # never counted towards "the server is down"
    assert pool._open == 0  # the slot it took is given back
