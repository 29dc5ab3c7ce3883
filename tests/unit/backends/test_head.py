"""A response head read: how its body is framed, and whether the connection may be kept."""

from __future__ import annotations

import pytest

from loadtest.transport.head import Head, read_head


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked", Head(200, {}, True, "chunked")),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12", Head(200, {}, True, "length", 12)),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0", Head(200, {}, True)),
        (b"HTTP/1.1 204 No Content", Head(204, {}, True)),
        # RFC 9112 6.3: chunked must come last, else the body ends with the connection; a
        # chunked body's Content-Length is left aside
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, identity", Head(200, {}, False, "to_close")),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9", Head(200, {}, True, "chunked")),
        (b"HTTP/1.1 200 OK", Head(200, {}, False, "to_close")),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2", Head(200, {}, False, "length", 2)),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2", Head(200, {}, False, "length", 2)),
        (b"HTTP/1.1 100 Continue\r\nX-Ignored: 1", Head(100, {}, True)),
    ],
)  # fmt: skip
def test_the_body_is_framed_as_the_head_says(raw, expected):
    got = read_head(raw)
    assert (got.status, got.keep_alive, got.body, got.length, got.refused) == (
        expected.status, expected.keep_alive, expected.body, expected.length, None,
    )  # fmt: skip


def test_repeated_headers_join_and_names_are_lower_case():
    got = read_head(b"HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a: 2\r\nContent-Type : text/plain ")
    assert got.headers == {"x-a": "1, 2", "content-type": "text/plain"}


@pytest.mark.parametrize(
    ("raw", "refused"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip", "compressed the stream (gzip)"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked", "compressed the stream (gzip"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1", "a Content-Length that is no length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: ten", "a Content-Length that is no length"),
    ],
)
def test_a_body_that_cannot_be_read_is_refused_with_its_head_kept(raw, refused):
    got = read_head(raw)
    assert got.status == 200 and got.refused is not None and refused in got.refused


@pytest.mark.parametrize(
    "raw", [b"SSH-2.0-OpenSSH_9.6", b"HTTP/2 200 OK", b"HTTP/1.1 700 Odd", b"HTTP/1.1 OK"]
)
def test_a_status_line_that_is_no_http_1_responses_is_an_error(raw):
    with pytest.raises(ValueError, match="status line"):
        read_head(raw)


def test_take_head_passes_over_interim_answers_and_keeps_an_unfinished_head():
    from loadtest.transport.head import MAX_INTERIM, take_head

    two_interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\n"
    final = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
    taken = take_head(two_interim + final, 0)
    assert (taken.head.status, taken.rest, taken.interim, taken.error) == (200, b"hi", 2, None)
    # the head split over reads: the first keeps its bytes, the interims counted so far
    first = take_head(two_interim + b"HTTP/1.1 200 O", 0)
    assert (first.head, first.pending, first.interim) == (None, b"HTTP/1.1 200 O", 2)
    second = take_head(first.pending + b"K\r\n\r\n", first.interim)
    assert (second.head.status, second.rest, second.interim) == (200, b"", 2)
    # only interims so far: nothing pending, their count kept
    assert take_head(b"HTTP/1.1 100 Continue\r\n\r\n", 5) == type(taken)(interim=6)
    assert (
        take_head(b"SSH-2.0-OpenSSH\r\n", 0).error
        == "not an HTTP status line: b'SSH-2.0-OpenSSH\\r'"
    )
    assert take_head(b"HTTP/1.1 100 Continue\r\n\r\n", MAX_INTERIM).error == (
        f"more than {MAX_INTERIM} interim answers"
    )
    assert take_head(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20000, 0).error == (
        "a response head past 64 KiB"
    )
