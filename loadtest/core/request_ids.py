"""Each request's correlation id, and its W3C trace context (``traceparent``) when the run is
traced: the header lines a request carries so that a server's logs and spans join it."""

from __future__ import annotations

import random

LOW_64 = (1 << 64) - 1


class RequestIds:
    """A request's id is 128 random bits as 32 hex digits: sent in ``header`` (unless empty),
    and when ``traced``, the trace id of its ``traceparent`` (W3C Trace Context), its span id
    the id's low 64 bits, flagged sampled for a share ``ratio`` of the requests (``sampled``).
    ``next()`` gives the id and the header lines to send."""

    def __init__(self, header: str, traced: bool, ratio: float = 1.0) -> None:
        self._random = random.Random()  # seeded from the OS: every process its own ids
        self._header = header.encode()
        self._traced = traced
        self._ratio = ratio
        self.active = bool(header) or traced

    def next(self) -> tuple[str, bytes]:
        n = self._random.getrandbits(128)
        if not n & LOW_64:  # a span id of zero is invalid (1 in 2**64)
            n |= 1
        rid = f"{n:032x}"
        head = b"%s: %s\r\n" % (self._header, rid.encode()) if self._header else b""
        if self._traced:
            flags = b"01" if sampled(rid, self._ratio) else b"00"
            head += b"traceparent: 00-%s-%s-%s\r\n" % (rid.encode(), rid[16:].encode(), flags)
        return rid, head


def sampled(request_id: str, ratio: float) -> bool:
    """Whether the request whose trace id is ``request_id`` is traced, of a share ``ratio``:
    OpenTelemetry's TraceIdRatioBased rule (the id's low 64 bits under ratio x 2**64), so a
    collector or server that samples by the same rule keeps the same traces."""
    if ratio >= 1.0:
        return True
    return int(request_id[16:], 16) < round(ratio * (1 << 64))


def span_id(request_id: str) -> str:
    """The span id of the request whose trace id is ``request_id``."""
    return request_id[16:]
