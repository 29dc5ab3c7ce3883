"""Where a call goes (``Endpoint``) and which way (``ClientSettings.proxy_for``): the URL forms
users give, and the proxy rules Python users expect, checked by hand."""

from __future__ import annotations

import asyncio
import time

import pytest

from loadtest.transport.endpoint import Endpoint
from loadtest.transport.http1 import HttpFailure
from loadtest.transport.pool import ConnectionPool
from loadtest.transport.settings import ClientSettings

PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")


@pytest.mark.parametrize(
    "url, origin, path, host_header",
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000", "/v1", "127.0.0.1:8000"),
        ("https://api.example.com/v1/models?x=1", "https://api.example.com:443",
         "/v1/models?x=1", "api.example.com"),
        ("http://[::1]:80/", "http://[::1]:80", "/", "[::1]"),
        ("http://u:p%40ss@h:81", "http://h:81", "/", "h:81"),
        ("unix:///run/vllm.sock:/v1", "unix:///run/vllm.sock", "/v1", "localhost"),
        ("unix:///run/vllm.sock:", "unix:///run/vllm.sock", "/", "localhost"),
        ("unix:///run/vllm.sock:/v1/models?limit=2", "unix:///run/vllm.sock",
         "/v1/models?limit=2", "localhost"),
    ],
)  # fmt: skip
def test_a_url_is_parsed_into_its_origin_path_and_host_header(url, origin, path, host_header):
    e = Endpoint.parse(url)
    assert (e.origin, e.path, e.host_header) == (origin, path, host_header)
    assert "p@ss" not in repr(e) and "p@ss" not in e.url


def test_credentials_are_kept_apart_decoded():
    e = Endpoint.parse("https://us%3Aer:p%40ss@h/v1")
    assert (e.username, e.password, e.url) == ("us:er", "p@ss", "https://h:443/v1")


@pytest.mark.parametrize(
    "url, said",
    [
        ("ftp://h/v1", "give an http://, https:// or unix:// URL"),
        ("file:///etc/passwd", "give an http://, https:// or unix:// URL"),
        ("http:///v1", "no host"),
        ("http://h:port/v1", "not a URL"),
        ("unix:///run/vllm.sock", "after the socket's file and a colon, such as "
         "unix:///run/vllm.sock:/v1"),
        ("unix://run/vllm.sock:/v1", "names its file"),
    ],
)  # fmt: skip
def test_a_url_that_cannot_be_used_is_refused_saying_why(url, said):
    with pytest.raises(ValueError, match=said.replace("?", r"\?").replace("/", "/")):
        Endpoint.parse(url)


@pytest.fixture
def env(monkeypatch):
    for name in PROXY_ENV:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    "variables, url, proxy",
    [
        ({}, "http://10.0.0.5:8000/v1", None),
        ({"HTTP_PROXY": "http://p:3128"}, "http://10.0.0.5:8000/v1", "http://p:3128"),
        # each scheme its own variable: https goes by HTTPS_PROXY only
        ({"HTTP_PROXY": "http://p:3128"}, "https://10.0.0.5/v1", None),
        ({"HTTPS_PROXY": "p2:8080"}, "https://10.0.0.5/v1", "http://p2:8080"),
        # the standard library's NO_PROXY rules: a host, a domain suffix, "*"
        ({"HTTP_PROXY": "http://p:3128", "NO_PROXY": "10.0.0.5"}, "http://10.0.0.5:8000/v1", None),
        ({"HTTP_PROXY": "http://p:3128", "NO_PROXY": ".corp"}, "http://gpu1.corp/v1", None),
        ({"HTTP_PROXY": "http://p:3128", "NO_PROXY": ".corp"}, "http://gpu1.other/v1",
         "http://p:3128"),
        ({"HTTP_PROXY": "http://p:3128", "NO_PROXY": "*"}, "http://gpu1/v1", None),
        # lower case as well, as curl and Python read them
        ({"http_proxy": "http://p:3128"}, "http://gpu1/v1", "http://p:3128"),
        # a Unix socket never goes through a proxy
        ({"HTTP_PROXY": "http://p:3128"}, "unix:///run/v.sock:/v1", None),
    ],
)  # fmt: skip
def test_the_environments_proxy_is_taken_as_python_takes_it(env, variables, url, proxy):
    for k, v in variables.items():
        env.setenv(k, v)
    got = ClientSettings().proxy_for(Endpoint.parse(url))
    assert (got.origin if got else None) == (Endpoint.parse(proxy).origin if proxy else None)


def test_a_named_proxy_wins_and_none_goes_straight(env):
    env.setenv("HTTP_PROXY", "http://p:3128")
    env.setenv("NO_PROXY", "gpu1")
    target = Endpoint.parse("http://gpu1:8000/v1")
    assert ClientSettings(proxy="http://q:9000").proxy_for(target).origin == "http://q:9000"
    assert ClientSettings(proxy="none").proxy_for(Endpoint.parse("http://gpu2/v1")) is None


def test_an_https_proxy_url_is_refused_saying_what_is_spoken():
    with pytest.raises(ValueError, match="only an http:// proxy"):
        ClientSettings(proxy="https://p:3128").proxy_for(Endpoint.parse("http://h/v1"))


def test_headers_go_to_the_servers_origin_only():
    s = ClientSettings(headers={"Authorization": "Bearer k"}, origin="http://srv:8000")
    assert s.headers_for(Endpoint.parse("http://srv:8000/metrics")) == {"Authorization": "Bearer k"}
    assert s.headers_for(Endpoint.parse("http://dcgm:9400/metrics")) == {}
    assert s.headers_for(Endpoint.parse("https://srv:8000/metrics")) == {}


def _via_a_proxy(url: str, answer: bytes, credentials: str = "") -> tuple[object, bytes]:
    """GET ``url`` through a proxy on loopback that answers ``answer`` to whatever comes:
    the body read (or the HttpFailure), and the head the proxy was sent."""
    seen: list[bytes] = []

    async def handle(reader, writer):
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(answer)
        await writer.drain()
        writer.close()

    async def main():
        proxy = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = proxy.sockets[0].getsockname()[1]
        settings = ClientSettings(proxy=f"http://{credentials}127.0.0.1:{port}")
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
            proxy.close()

    got = asyncio.run(main())
    return got, seen[0]


def test_through_a_proxy_an_http_request_names_its_whole_url_and_the_proxys_credentials():
    """What reaches the proxy, byte for byte: the absolute-form request line, the server's
    Host, and the proxy's own credentials as Proxy-Authorization (never the URL's)."""
    got, head = _via_a_proxy(
        "http://gpu1:8000/v1/x?a=1", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "me:pw@"
    )
    assert got == b"ok"
    lines = head.decode().split("\r\n")
    assert lines[0] == "GET http://gpu1:8000/v1/x?a=1 HTTP/1.1"
    assert "Host: gpu1:8000" in lines
    assert "Proxy-Authorization: Basic bWU6cHc=" in lines  # base64("me:pw")


@pytest.mark.parametrize(
    "answer, said",
    [
        (b"HTTP/1.1 403 Forbidden\r\n\r\n", "the proxy refused the tunnel: HTTP 403 Forbidden"),
        (b"", "the proxy closed the connection before its answer"),
    ],
)
def test_a_tunnel_the_proxy_refuses_fails_the_connect_saying_so(answer, said):
    failure, head = _via_a_proxy("https://gpu1:8443/v1/x", answer)
    assert isinstance(failure, HttpFailure)
    assert failure.kind == "proxy_error" and failure.connecting
    assert said in str(failure)
    assert head.split(b"\r\n")[0] == b"CONNECT gpu1:8443 HTTP/1.1"


def test_a_samplers_scrape_gives_the_page_or_why_not():
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from loadtest.transport.calls import scrape

    class Page(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"up 1\n"
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = f"http://127.0.0.1:{server.server_address[1]}"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/metrics"
    try:
        assert scrape(ClientSettings(), root + "/metrics", 1 << 16, 5.0) == (b"up 1\n", None)
        assert scrape(ClientSettings(), root + "/nope", 1 << 16, 5.0) == (None, "HTTP 404")
        page, why = scrape(ClientSettings(), dead, 1 << 16, 5.0)
        assert page is None and why is not None and why.startswith("connect_error: ")
    finally:
        server.shutdown()
