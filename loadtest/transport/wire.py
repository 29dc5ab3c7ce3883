"""A request's stamps on the wire, as the pool takes them (``pool.ConnectionPool``)."""

from __future__ import annotations

from loadtest.core.events import Sent


class Wire:
    """A request's stamps, as the pool takes them: when it started in the client and when its
    bytes left (with the thread's CPU time at both), its waits on the way: for a pooled
    connection (``queued_ns``) and for a new one (``connect_ns``, of which ``tls_ns`` the TLS
    handshake), when it had its connection (``connected_ns``) and when the answer's first byte
    came (``first_byte_ns``)."""

    __slots__ = (
        "connect_ns",
        "connected_ns",
        "cpu_sent_ns",
        "cpu_start_ns",
        "first_byte_ns",
        "queued_ns",
        "retries",
        "sent_ns",
        "start_ns",
        "tls_ns",
    )

    def __init__(self) -> None:
        self.sent_ns = self.start_ns = self.cpu_start_ns = self.cpu_sent_ns = 0
        self.queued_ns = self.connect_ns = self.tls_ns = self.retries = 0
        self.connected_ns = self.first_byte_ns = 0

    def sent(self, endpoint: str | None = None, request_id: str | None = None) -> Sent:
        """The send (to ``endpoint``, of several, carrying ``request_id``), and where the
        client's part of its lateness went: the thread was off the CPU for whatever of the
        elapsed time it neither ran nor waited on the network for."""
        elapsed = max(0, self.sent_ns - self.start_ns)
        waited = self.queued_ns + self.connect_ns
        off_cpu = elapsed - (self.cpu_sent_ns - self.cpu_start_ns) - waited
        return Sent(
            self.sent_ns,
            pool_ns=self.queued_ns,
            connect_ns=self.connect_ns,
            off_cpu_ns=max(0, off_cpu),
            retries=self.retries,
            endpoint=endpoint,
            tls_ns=self.tls_ns,
            connected_ns=self.connected_ns,
            first_byte_ns=self.first_byte_ns,
            request_id=request_id,
        )
