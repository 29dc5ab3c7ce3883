"""The harness's line to one engine worker: messages down through a sender thread (a stopped
worker fills the pipe, and a blocking write would freeze the event loop and every signal
handler with it), and the worker's messages up through a reader thread that turns them into
events on each request's queue (one ``call_soon_threadsafe`` per message the worker writes: a
few decode steps, not a token) or into replies, each awaited with a deadline. When the worker
dies, every waiter gets ``DEATH``."""

from __future__ import annotations

import asyncio
import queue
import threading
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any

from loadtest.core.errors import BackendError
from loadtest.core.events import Admitted, Failed, Finished, Tokens

DEATH = object()  # put on every queue when the worker is gone


class WorkerPipe:
    """The pipes to and from one engine worker, the request queues its messages feed, and why
    it is dead (None while it lives)."""

    def __init__(self) -> None:
        self.queues: dict[int, asyncio.Queue] = {}  # request id -> its events
        # the worker's replies (a queue binds to the loop that first waits on it)
        self.reply: asyncio.Queue = asyncio.Queue()
        self.dead: str | None = None
        self._outq: queue.SimpleQueue = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self, ctx: SpawnContext, label: str) -> tuple[Connection, Connection]:
        """The pipes, and the sender thread writing down one; returns the worker's ends (its
        inbox to read, its outbox to write), to hand to the process and close here after."""
        to_worker_r, to_worker = ctx.Pipe(duplex=False)
        threading.Thread(
            target=_send_loop,
            args=(to_worker, self._outq),
            daemon=True,
            name=f"loadtest-engine{label}-sender",
        ).start()
        self._from_worker, from_worker_w = ctx.Pipe(duplex=False)
        return to_worker_r, from_worker_w

    def listen(self, proc: SpawnProcess, label: str) -> None:
        """Read the worker's messages (on a thread) into this event loop's queues."""
        self._loop = asyncio.get_running_loop()
        threading.Thread(
            target=self._read,
            args=(self._from_worker, proc),
            daemon=True,
            name=f"loadtest-engine{label}-reader",
        ).start()

    def close(self) -> None:
        """The sender thread ends once what is queued is written."""
        self._outq.put(None)

    def send(self, message: tuple) -> None:
        """A message to the worker (``messages``): never blocks, the sender thread writes it."""
        self._outq.put(message)

    async def reply_within(self, what: str, timeout_s: float) -> Any:  # a reply, or DEATH
        """The worker's next reply, or ``BackendError`` when it has not come in time."""
        if self._loop is None:
            raise BackendError(f"engine worker not started ({what})")
        try:
            return await asyncio.wait_for(self.reply.get(), timeout_s)
        except asyncio.TimeoutError:
            self.dead = self.dead or f"engine worker did not answer ({what}) within {timeout_s:g} s"
            raise BackendError(self.dead) from None

    # -- reader thread -> event loop ------------------------------------------------------------

    def _read(self, conn: Connection, proc: SpawnProcess) -> None:
        loop = self._loop
        assert loop is not None  # listen() set it
        try:
            while True:
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    proc.join(1)
                    loop.call_soon_threadsafe(self._on_death, proc.exitcode)
                    return
                loop.call_soon_threadsafe(self._on_message, msg)
        except RuntimeError:  # the event loop closed first (the run is over): nobody to tell
            return

    def _on_message(self, msg: tuple) -> None:  # a messages.Outbound, read by its kind
        kind = msg[0]
        if kind == "many":  # what the worker's outbox coalesced into one write
            for m in msg[1]:
                self._on_message(m)
            return
        queues = self.queues
        if kind == "tokens":  # a run of decode steps: every rid listed got a token at each stamp
            ev: Tokens | Admitted | Failed = Tokens(msg[1])
            for rid in msg[2]:
                q = queues.get(rid)
                if q is not None:
                    q.put_nowait(ev)
        elif kind == "stamps":
            for rid, t_ns in msg[1]:
                q = queues.get(rid)
                if q is not None:
                    q.put_nowait(Tokens(t_ns))
        elif kind == "admitted":
            ev = Admitted(msg[1])
            for rid in msg[2]:
                if rid in queues:
                    queues[rid].put_nowait(ev)
        elif kind == "done":
            if msg[2] in queues:
                queues[msg[2]].put_nowait(Finished(msg[1], msg[3]))
        elif kind == "failed":
            ev = Failed(msg[1], msg[3], msg[4])
            for rid in msg[2]:
                if rid in queues:
                    queues[rid].put_nowait(ev)
        elif kind == "crashed":  # the worker's last words; its death follows
            self.dead = f"engine worker crashed: {msg[1]}"
        else:  # ready / load_failed / warmed / facts / stopped: replies to start, prepare, point_facts, stop
            self.reply.put_nowait(msg)

    def _on_death(self, exitcode: int | None) -> None:
        if self.dead is None:
            self.dead = f"engine worker exited (exit code {exitcode})"
        for q in self.queues.values():
            q.put_nowait(DEATH)
        self.reply.put_nowait(DEATH)


def _send_loop(conn: Connection, outq: queue.SimpleQueue) -> None:
    """Writes queued messages to the worker's pipe, in order; ends at ``None`` or a broken pipe."""
    while True:
        msg = outq.get()  # a thread of its own: waiting here blocks nothing else
        if msg is None:
            break
        try:
            conn.send(msg)
        except (OSError, ValueError):
            break
    conn.close()
