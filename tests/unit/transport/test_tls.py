"""TLS as the user meets it: a private CA, a client certificate (its key locked by a password
from the environment), and each failure named by its cause, against TLS servers on loopback
(certificates from trustme)."""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest

from loadtest.transport.http1 import HttpFailure
from loadtest.transport.pool import ConnectionPool
from loadtest.transport.settings import ClientSettings
from loadtest.transport.wire import Wire

trustme = pytest.importorskip("trustme")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, certificates from it (the server's for 127.0.0.1; one for localhost only; an
    expired one; a client's), and a stranger CA's client: each as its key and chain in one
    file, and (``<name>-cert``) its chain alone."""
    folder = tmp_path_factory.mktemp("pki")
    ca, stranger = trustme.CA(), trustme.CA()
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    files = {}
    for name, cert in {
        "server": ca.issue_cert("127.0.0.1"),
        "localhost": ca.issue_cert("localhost"),
        "expired": ca.issue_cert("127.0.0.1", not_before=past, not_after=past.replace(month=2)),
        "client": ca.issue_cert("client@example.com"),
        "stranger": stranger.issue_cert("stranger@example.com"),
    }.items():
        files[name] = folder / f"{name}.pem"
        cert.private_key_and_cert_chain_pem.write_to_path(str(files[name]))
        files[f"{name}-cert"] = folder / f"{name}-cert.pem"
        files[f"{name}-cert"].write_bytes(b"".join(b.bytes() for b in cert.cert_chain_pems))
    files["ca"] = folder / "ca.pem"
    ca.cert_pem.write_to_path(str(files["ca"]))
    return files


def _server_context(pki, cert: str = "server", require_client: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(pki[cert]))
    if require_client:
        ctx.load_verify_locations(str(pki["ca"]))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _answering(heads: list[bytes] | None = None, hold_s: float = 0.0):
    """A connection handler that answers each request ``ok`` (kept alive), ``hold_s`` after
    its head came, keeping the heads in ``heads``."""

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if heads is not None:
                    heads.append(head)
                await asyncio.sleep(hold_s)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        writer.close()

    return handle


def _get(server_ctx: ssl.SSLContext, settings: ClientSettings):
    """One GET to an asyncio TLS server on loopback: ``b"ok"``, or the HttpFailure."""

    async def main():
        server = await asyncio.start_server(_answering(), "127.0.0.1", 0, ssl=server_ctx)
        url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        pool = ConnectionPool(url, settings, 0, time.monotonic_ns)
        try:
            resp = await pool.request("GET", url)
            body = await resp.read(100)
            resp.release()
            return body
        except HttpFailure as exc:
            return exc
        finally:
            await pool.close()
            server.close()

    return asyncio.run(main())


@pytest.mark.parametrize(
    "cert, given, said",
    [
        ("server", {}, "signed by a CA this client does not trust: give it as ca_bundle"),
        ("localhost", {"ca_bundle": "ca"}, "not for this IP address"),
        ("expired", {"ca_bundle": "ca"}, "the server's certificate has expired"),
        ("server", {"ca_bundle": "ca"}, None),
        ("expired", {"verify_tls": False}, None),
    ],
    ids=["unknown-ca", "wrong-name", "expired", "private-ca", "unverified"],
)
def test_the_servers_certificate_is_judged_and_a_failure_says_why(pki, cert, given, said):
    settings = ClientSettings(**{k: pki.get(v, v) if k == "ca_bundle" else v
                                 for k, v in given.items()})  # fmt: skip
    got = _get(_server_context(pki, cert), settings)
    if said is None:
        assert got == b"ok"
    else:
        assert isinstance(got, HttpFailure) and got.kind == "tls_error" and got.connecting
        assert said in str(got)


def test_a_required_client_certificate_is_given_and_its_absence_named(pki):
    required = _server_context(pki, require_client=True)
    got = _get(required, ClientSettings(ca_bundle=pki["ca"], client_cert=pki["client"]))
    assert got == b"ok"
    # asyncio's server sends no alert: the drop after the handshake is named by its likely cause
    got = _get(required, ClientSettings(ca_bundle=pki["ca"]))
    assert isinstance(got, HttpFailure) and got.kind == "tls_error"
    assert "does it require a client certificate? (client_cert, client_key)" in str(got)
    got = _get(required, ClientSettings(ca_bundle=pki["ca"], client_cert=pki["stranger"]))
    assert isinstance(got, HttpFailure) and "does it refuse this client certificate" in str(got)


def test_a_server_that_sends_its_alert_is_heard_word_for_word(pki):
    """OpenSSL's own servers (nginx, envoy, Python's blocking ssl) send TLS 1.3's alert after
    the handshake: the failure says exactly that a client certificate is required."""
    ctx = _server_context(pki, require_client=True)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        listener.settimeout(20)
        for _ in range(3):  # the request's connection, and the diagnosis's
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (OSError, ssl.SSLError):
                pass

    threading.Thread(target=serve, daemon=True).start()

    async def main():
        url = f"https://127.0.0.1:{port}/v1"
        pool = ConnectionPool(url, ClientSettings(ca_bundle=pki["ca"]), 0, time.monotonic_ns)
        try:
            await pool.request("GET", url)
        except HttpFailure as exc:
            return exc
        finally:
            await pool.close()

    got = asyncio.run(main())
    listener.close()
    assert isinstance(got, HttpFailure) and got.kind == "tls_error"
    assert "the server requires a client certificate: give client_cert and client_key" in str(got)


def test_a_locked_client_key_opens_with_the_password_and_a_wrong_one_is_named(pki, tmp_path):
    from cryptography.hazmat.primitives import serialization

    pem = Path(pki["client"]).read_bytes()
    key = serialization.load_pem_private_key(pem, None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"hunter2"),
        )
    )
    settings = ClientSettings(
        ca_bundle=pki["ca"],
        client_cert=pki["client-cert"],
        client_key=locked,
        client_key_password="hunter2",
    )
    assert _get(_server_context(pki, require_client=True), settings) == b"ok"
    wrong = ClientSettings(client_cert=pki["client-cert"], client_key=locked,
                           client_key_password="nope")  # fmt: skip
    with pytest.raises(ValueError, match="the key does not open"):
        wrong.ssl_context()
    with pytest.raises(ValueError, match="the key is not the certificate's"):
        ClientSettings(client_cert=pki["client-cert"], client_key=pki["stranger"]).ssl_context()


def test_ssl_cert_file_is_trusted_as_openssl_reads_it(pki, monkeypatch):
    """No ca_bundle: the system's CAs, or SSL_CERT_FILE's where it is set."""
    monkeypatch.setenv("SSL_CERT_FILE", str(pki["ca"]))
    assert _get(_server_context(pki), ClientSettings()) == b"ok"


def test_a_requests_phases_are_stamped_in_order_with_its_tls_handshake_apart(pki):
    """A new https connection: its wait (TCP and TLS) and of it the handshake, then the send,
    then the answer's first byte (the server holds its head 50 ms); the next request on the
    kept-alive connection waits for none. The request's own header lines reach the server."""
    heads: list[bytes] = []

    async def main():
        handle = _answering(heads, hold_s=0.05)
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=_server_context(pki))
        url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        pool = ConnectionPool(url, ClientSettings(ca_bundle=pki["ca"]), 0, time.monotonic_ns)
        wires = []
        try:
            for n in range(2):
                wire = Wire()
                resp = await pool.request("GET", url, wire=wire, head=b"X-Request-Id: r%d\r\n" % n)
                assert await resp.read(100) == b"ok"
                resp.release()
                wires.append(wire)
        finally:
            await pool.close()
            server.close()
        return wires

    first, second = asyncio.run(main())
    assert 0 < first.tls_ns <= first.connect_ns
    assert first.start_ns <= first.connected_ns <= first.sent_ns < first.first_byte_ns
    assert first.first_byte_ns - first.sent_ns >= 50_000_000  # the server's hold, at least
    assert second.connect_ns == second.tls_ns == 0
    assert second.start_ns <= second.connected_ns <= second.sent_ns < second.first_byte_ns
    sent = first.sent(None, "r0")
    assert (sent.tls_ns, sent.connected_ns, sent.first_byte_ns, sent.request_id) == (
        first.tls_ns, first.connected_ns, first.first_byte_ns, "r0",
    )  # fmt: skip
    assert [h.split(b"\r\n")[-3] for h in heads] == [b"X-Request-Id: r0", b"X-Request-Id: r1"]
