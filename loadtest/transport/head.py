"""A response head of loadtest's HTTP/1.1 client, read: its status, its headers, whether the
connection may carry another request, and how the body that follows is framed (RFC 9112
6.3). ``http1.Connection`` keeps the state; this reads the bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_HEAD_BYTES = 64 << 10  # a response head past this is no server's answer
MAX_INTERIM = 100  # interim answers (100 Continue, 103) before a response's head: more is no server
# a head ends at a blank line; lines may end in a bare LF (RFC 9112 2.2 lets a client accept it)
HEAD_END = re.compile(rb"\r?\n\r?\n")


@dataclass(frozen=True, slots=True)
class Head:
    """``body``: "none" (204, 304, a Content-Length of 0), "chunked", "length" (``length``
    bytes) or "to_close" (it ends with the connection). ``refused``: why the body cannot be
    read (a compressed one, a Content-Length that is no length), else None."""

    status: int
    headers: dict[str, str]
    keep_alive: bool
    body: str = "none"
    length: int = 0
    refused: str | None = None


def read_head(raw: bytes) -> Head:
    """The head whose bytes (up to its blank line) are ``raw``, its lines ending in CRLF or a
    bare LF; ValueError for a status line that is no HTTP/1 response's. An interim answer (1xx) comes back with its status alone:
    the real head follows it."""
    lines = [line.removesuffix("\r") for line in raw.decode("latin-1").split("\n")]
    version, _, status = lines[0].partition(" ")
    try:
        code = int(status.partition(" ")[0])
    except ValueError:
        raise ValueError(f"not an HTTP status line: {lines[0][:80]!r}") from None
    if not version.startswith("HTTP/1.") or not 100 <= code <= 599:
        raise ValueError(f"not an HTTP/1 status line: {lines[0][:80]!r}")
    if code < 200:
        return Head(code, {}, True)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    keep_alive = headers.get("connection", "").lower() != "close" and version != "HTTP/1.0"
    codings = [c.strip() for c in headers.get("transfer-encoding", "").lower().split(",")]
    if headers.get("content-encoding", "identity").lower() != "identity" or any(
        c not in ("", "chunked", "identity") for c in codings
    ):
        coding = headers.get("content-encoding") or headers["transfer-encoding"]
        return Head(
            code,
            headers,
            keep_alive,
            refused=f"the server compressed the stream ({coding[:40]}) though asked not to: "
            "its tokens' arrivals cannot be read",
        )
    if code in (204, 304):
        return Head(code, headers, keep_alive)
    if codings != [""]:
        if codings[-1] == "chunked":
            return Head(code, headers, keep_alive, "chunked")
        return Head(code, headers, False, "to_close")  # not chunked last: to the close
    if "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            length = -1
        if length < 0:
            return Head(code, headers, keep_alive, refused="a Content-Length that is no length")
        return Head(code, headers, keep_alive, "length" if length else "none", length)
    return Head(code, headers, False, "to_close")


@dataclass(frozen=True, slots=True)
class Taken:
    """What a connection's unread head bytes held: the response's ``head`` where it is whole
    (and ``rest``, the body's bytes after it), or the ``pending`` bytes of one still coming;
    the ``interim`` answers passed over so far; or why they are no HTTP response (``error``)."""

    head: Head | None = None
    rest: bytes = b""
    pending: bytes = b""
    interim: int = 0
    error: str | None = None


def take_head(data: bytes, interim: int) -> Taken:
    """The response head at the start of ``data``, interim answers (100 Continue) before it
    passed over, however many (a loop: no recursion); ``interim``: those passed over already."""
    while True:
        if data[:5] != b"HTTP/"[: len(data)]:  # judged at once, not at a blank line to come
            line = data.split(b"\n", 1)[0][:80]
            return Taken(interim=interim, error=f"not an HTTP status line: {line!r}")
        found = HEAD_END.search(data)
        if found is None:
            if len(data) > MAX_HEAD_BYTES:
                return Taken(interim=interim, error="a response head past 64 KiB")
            return Taken(pending=data, interim=interim)
        rest = data[found.end() :]
        try:
            got = read_head(data[: found.start()])
        except ValueError as exc:
            return Taken(interim=interim, error=str(exc))
        if got.status >= 200:
            return Taken(got, rest, interim=interim)
        interim += 1  # an interim answer (100 Continue): the real head comes after it
        if interim > MAX_INTERIM:
            return Taken(interim=interim, error=f"more than {MAX_INTERIM} interim answers")
        data = rest
        if not data:
            return Taken(interim=interim)
