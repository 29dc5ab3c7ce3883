"""Each request's correlation id, and its W3C trace context (``traceparent``) when the run is
traced: the header lines a request carries so that a server's logs and spans join it."""

from __future__ import annotations

import random

LOW_64 = (1 << 64) - 1


class RequestIds:
    """A request's id is 128 random bits as 32 hex digits: sent in ``header`` (unless empty),
    and when ``traced``, the trace id of its ``traceparent`` (W3C Trace Context, sampled), its
    span id the id's low 64 bits. ``next()`` gives the id and the header lines to send."""

    def __init__(self, header: str, traced: bool) -> None:
        self._random = random.Random()  # seeded from the OS: every process its own ids
        self._header = header.encode()
        self._traced = traced
        self.active = bool(header) or traced

    def next(self) -> tuple[str, bytes]:
        n = self._random.getrandbits(128)
        if not n & LOW_64:  # a span id of zero is invalid (1 in 2**64)
            n |= 1
        rid = f"{n:032x}"
        head = b"%s: %s\r\n" % (self._header, rid.encode()) if self._header else b""
        if self._traced:
            head += b"traceparent: 00-%s-%s-01\r\n" % (rid.encode(), rid[16:].encode())
        return rid, head


def span_id(request_id: str) -> str:
    """The span id of the request whose trace id is ``request_id``."""
    return request_id[16:]
