"""Server-sent events, incrementally: bytes as they arrive -> the ``data`` of each complete event,
and where it ended (the byte that completed it: its arrival is the event's).

Per the WHATWG EventSource rules that OpenAI-compatible servers follow: events end at a blank
line (``\\n\\n``, ``\\r\\n\\r\\n`` or ``\\r\\r``); an event's ``data:`` lines are joined with
``\\n``; one optional space after the colon is dropped; comments (``:``) and other fields
(``event:``, ``id:``, ``retry:``) are ignored. An event split across network reads is held until
its end arrives.
"""

from __future__ import annotations

import re
from itertools import accumulate

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE = re.compile(rb"\r\n|\n|\r")
_SEPARATOR = len(b"\n\ndata: ")


MAX_EVENT_BYTES = 4 << 20  # one event past this is no chunk of a stream: refused


class EventTooLarge(ValueError):
    """An event that does not end within ``MAX_EVENT_BYTES``."""


class SseParser:
    """Server-sent events from a byte stream, as the spec frames them."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> tuple[list[bytes], list[int]]:
        """The data of every event completed by ``chunk`` (events without data are skipped),
        as bytes (UTF-8, checked by whoever decodes it), and apart, where in ``chunk`` each
        event ended (just past its blank line: the byte that completed it); ``EventTooLarge``
        when an event runs past ``MAX_EVENT_BYTES`` without ending."""
        held = len(self._buf)
        buf = self._buf + chunk if held else chunk
        if b"\r" not in buf:
            # the common stream, events of one ``data: `` line each, split in one pass up to
            # the last complete one (the rest held), where every newline before it is one of the
            # separators' (counted, not looked for event by event). Anything else (a comment,
            # another field) goes by the general rules, which give the same events for these
            last = buf.rfind(b"\n\n")
            if last < 0:
                if len(buf) <= MAX_EVENT_BYTES:
                    self._buf = buf
                    return [], []
            elif (
                buf.startswith(b"data: ")
                and buf.count(b"\n", 0, last)
                == 2 * len(datas := buf[6:last].split(b"\n\ndata: ")) - 2
            ):
                # each event's end: its data, 8 bytes of "\n\ndata: " (the first's "data: "
                # and the last's "\n\n" make 8 too), from where ``chunk`` began
                ends = list(accumulate(map(_SEPARATOR.__add__, map(len, datas)), initial=-held))
                del ends[0]
                self._buf = buf[last + 2 :]
                if len(self._buf) > MAX_EVENT_BYTES:
                    raise EventTooLarge(
                        f"an event ran past {MAX_EVENT_BYTES >> 20} MiB without ending"
                    )
                return datas, ends
        return self.feed_general(chunk)

    def feed_general(self, chunk: bytes) -> tuple[list[bytes], list[int]]:
        """``feed`` by the spec's rules alone, for any bytes."""
        held = len(self._buf)  # an event's end lies in ``chunk``: the held bytes did not end one
        buf = self._buf + chunk
        datas, ends = [], []
        start = 0
        for m in _EVENT_END.finditer(buf):
            data = _event_data(buf[start : m.start()])
            if data is not None:
                datas.append(data)
                ends.append(m.end() - held)
            start = m.end()
        self._buf = buf[start:]
        if len(self._buf) > MAX_EVENT_BYTES:
            raise EventTooLarge(f"an event ran past {MAX_EVENT_BYTES >> 20} MiB without ending")
        return datas, ends

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet ended (a stream that stops here was cut short)."""
        return self._buf


def _event_data(block: bytes) -> bytes | None:
    parts = []
    for line in _LINE.split(block):
        if line.startswith(b"data:"):
            value = line[5:]
            parts.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(parts) if parts else None
