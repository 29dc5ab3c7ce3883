"""How far another host's monotonic clock is from this one's, and how well that is known.

A worker on another node answers pings on a UDP socket with its clock (``EchoServer``, a daemon
thread, so the answer never waits for the worker's event loop). The coordinator sends a few
dozen pings and keeps the one with the shortest round trip, NTP's rule: the worker read its
clock somewhere inside that trip, so its offset is its reading minus the trip's midpoint, known
to within half the trip. Where UDP does not get through, the same rule applies to any round
trip (``best_of``), a Ray call's for instance, with its longer trip and wider bound.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

_PING = struct.Struct("!Q")  # sequence number
_PONG = struct.Struct("!Qq")  # sequence number, the answerer's monotonic ns


@dataclass(frozen=True)
class ClockOffset:
    """Another clock minus this one, within ``± uncertainty_ns``."""

    offset_ns: int
    uncertainty_ns: int
    method: str  # udp | ray | same clock
    samples: int


SAME_CLOCK = ClockOffset(0, 0, "same clock", 0)


def best_of(readings: list[tuple[int, int, int]], method: str) -> ClockOffset:
    """The offset from round trips ``(sent, their clock, received)``: the shortest trip's."""
    sent, theirs, received = min(readings, key=lambda r: r[2] - r[0])
    trip = received - sent
    return ClockOffset(theirs - (sent + received) // 2, (trip + 1) // 2, method, len(readings))


class EchoServer:
    """Answers each 8-byte ping with its sequence number and this host's monotonic clock
    (plus ``skew_ns``: a test plays a host whose clock differs)."""

    def __init__(self, host: str = "0.0.0.0", skew_ns: int = 0) -> None:
        self.skew_ns = skew_ns
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((host, 0))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="loadtest-clock-echo", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self._sock.recvfrom(64)
            except OSError:  # closed
                return
            if len(data) == _PING.size:
                (seq,) = _PING.unpack(data)
                try:
                    self._sock.sendto(_PONG.pack(seq, time.monotonic_ns() + self.skew_ns), peer)
                except OSError:
                    return

    def close(self) -> None:
        self._sock.close()


def measure_udp(
    host: str, port: int, samples: int = 48, timeout_s: float = 0.25
) -> ClockOffset | None:
    """Ping an ``EchoServer`` (blocking, at most ``samples * timeout_s``); None when no answer
    came back at all (a firewall, say: the first four pings tell)."""
    readings: list[tuple[int, int, int]] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect((host, port))
        for seq in range(samples):
            if seq == 4 and not readings:
                return None
            sent = time.monotonic_ns()
            try:
                sock.send(_PING.pack(seq))
                while True:  # skip a late answer to an earlier ping
                    got, theirs = _PONG.unpack(sock.recv(64)[: _PONG.size])
                    if got == seq:
                        break
            except (TimeoutError, OSError, struct.error):
                continue
            readings.append((sent, theirs, time.monotonic_ns()))
    return best_of(readings, "udp") if readings else None


def measure_calls(call: Callable[[], int], samples: int = 16) -> ClockOffset:
    """The offset through any blocking call that returns the other clock (a Ray call)."""
    readings = []
    for _ in range(samples):
        sent = time.monotonic_ns()
        theirs = call()
        readings.append((sent, theirs, time.monotonic_ns()))
    return best_of(readings, "ray")
