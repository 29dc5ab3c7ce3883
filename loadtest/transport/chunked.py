"""A chunked body's framing (RFC 9112 7.1), taken off across the reads it comes in.

``http1.Connection`` takes a read that is one whole chunk in one step itself (most reads of a
stream); every other read comes here. Bad framing and the body's end are said in fields, not
raised, so that the body's bytes read before them are kept and stamped like any others.
"""

from __future__ import annotations

MAX_LINE_BYTES = 4 << 10  # of a chunk's size line or a trailer


class Chunks:
    """Where a chunked body's framing is, between reads."""

    __slots__ = ("need", "crlf", "line", "trailers", "ended", "extra", "failure")

    def __init__(self) -> None:
        self.need = 0  # of the current chunk's data
        self.crlf = 0  # bytes of the CRLF after a chunk's data still to pass over
        self.line = b""  # a chunk-size or trailer line, begun in an earlier read
        self.trailers = False  # past the last chunk: trailer lines to their blank one
        self.ended = False  # the body is in
        self.extra = False  # bytes came past the body's end
        self.failure: str | None = None  # the framing is not HTTP's: why

    @property
    def between(self) -> bool:
        """Between two chunks: the next read may be one whole chunk."""
        return not (self.need or self.crlf or self.line or self.trailers or self.ended)

    def take(self, data: bytes, buf: bytearray) -> int:
        """The framing taken off ``data`` and the body's bytes added to ``buf``: their count.
        Stops at the body's end (``ended``) or at bad framing (``failure``)."""
        pos, n, got, need = 0, len(data), 0, self.need
        while pos < n:
            if need:
                take = need if need <= n - pos else n - pos
                buf += data[pos : pos + take] if take < n else data
                pos += take
                need -= take
                got += take
                if not need:
                    self.crlf = 2
            elif self.crlf:
                step = min(self.crlf, n - pos)
                pos += step
                self.crlf -= step
            else:
                end = data.find(b"\n", pos)
                line = self.line + data[pos : n if end < 0 else end]
                if end < 0:
                    self.line = line
                    if len(line) > MAX_LINE_BYTES:
                        self.failure = "a chunk line past 4 KiB"
                    break
                self.line, pos = b"", end + 1
                if self.trailers:
                    if not line.strip():
                        self.ended, self.extra = True, pos < n
                        break
                    continue
                try:
                    need = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self.failure = f"a chunk size that is no number: {line[:40]!r}"
                    break
                if need < 0:
                    self.failure = "a negative chunk size"
                    break
                self.trailers = need == 0
        self.need = need
        return got
