"""The engine worker's outgoing messages, produced and written by a thread of their own.

Whatever the generate() thread does between two decode steps delays the next launch and slows
the model being measured. Writing each step's message to the pipe itself (a system call that
wakes the parent's reader) and turning the step's tokens into per-request events in Python cost
the generate() thread more per step than a compiled step of a few milliseconds can spare for a
98% harness (bench/investigations/overhead_split.py).

So the generate() thread only stamps the step and queues it (``defer``: a deque append, no
wake-up while the writer is busy). The writer thread turns queued steps into messages and writes
them, several steps per write, waking every ``period`` (20 ms) while steps flow: the writer's
work holds the GIL, which the decode loop then waits for, so it runs once per period, not once
per step. Everything runs in queue order: a batch's ``done`` or ``failed`` always follows its
last ``tokens``. Stamps are taken before queuing, so deferring changes when the parent *learns*
of a token (at most ``period`` later), never the token's time.

``send`` is for messages the parent waits on (replies, ``admitted``), and ``call`` for work
whose result it waits on (a step where a request ends, a batch's end): queued in order and the
writer woken at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from loadtest.backends.transformers.messages import Outbound

import os
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterable

_CLOSE = object()

# work run on the writer thread: it returns the messages to send (None: none)
Deferred = Callable[..., "Iterable[Outbound] | None"]


class _Call:
    __slots__ = ("fn", "args")

    def __init__(self, fn: Deferred, args: tuple[object, ...]) -> None:
        self.fn, self.args = fn, args


class Outbox:
    """The worker's writer thread: builds and sends messages off the decode loop, coalescing what queued."""

    def __init__(self, conn: Connection, period_s: float = 0.020) -> None:
        self._conn, self.period_s = conn, period_s
        self._items: deque = deque()
        self._wake = threading.Event()
        self._idle = False
        self._thread = threading.Thread(target=self._write, name="loadtest-outbox", daemon=True)
        self._thread.start()

    def send(self, msg: Outbound) -> None:
        """Queue ``msg`` and wake the writer now."""
        self._items.append(msg)
        self._wake.set()

    def defer(self, fn: Deferred, *args: object) -> None:
        """Run ``fn(*args)`` on the writer thread, in queue order; it returns the messages to
        send. No wake-up unless the writer sleeps (it collects deferred work every period)."""
        self._items.append(_Call(fn, args))
        if self._idle:
            self._wake.set()

    def call(self, fn: Deferred, *args: object) -> None:
        """``defer``, and wake the writer now (a batch's last word)."""
        self._items.append(_Call(fn, args))
        self._wake.set()

    def flush(self, timeout: float = 30.0) -> None:
        """Return once everything queued so far is written."""
        done = threading.Event()
        self.call(lambda: done.set())
        done.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write everything queued, then stop the writer (before the process exits)."""
        self._items.append(_CLOSE)
        self._wake.set()
        self._thread.join(timeout)

    def _write(self) -> None:
        items, wake, conn = self._items, self._wake, self._conn
        while True:
            # Collect on a timer while steps flow (a batch defers one every few ms); only after a
            # quiet period does the writer sleep until woken, and then a ``defer`` wakes it.
            wake.wait(self.period_s)
            if not items:
                self._idle = True
                if not items:  # checked again after saying so: a ``defer`` in between wakes us
                    wake.wait()
                self._idle = False
            wake.clear()
            msgs: list = []
            closing = False
            while items:
                item = items.popleft()
                if item is _CLOSE:
                    closing = True
                elif type(item) is _Call:
                    try:
                        msgs.extend(item.fn(*item.args) or ())
                    except BaseException:  # a bug here would leave requests waiting forever:
                        traceback.print_exc()  # die instead, and the parent fails them (typed)
                        sys.stderr.flush()
                        os._exit(70)
                else:
                    msgs.append(item)
            try:
                if len(msgs) == 1:
                    conn.send(msgs[0])
                elif msgs:
                    conn.send(("many", msgs))
            except (OSError, ValueError):  # the parent is gone: nobody to tell
                return
            if closing:
                return
