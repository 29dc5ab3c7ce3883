"""The engine's outbox: the writer thread keeps order, coalesces what queued during a write, runs
deferred work in order, is woken for a step where a row ends, and flushes on close."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from loadtest.backends.transformers.outbox import Outbox
from loadtest.backends.transformers.stamping import StepStreamer
from loadtest.core.events import Finished, Tokens
from tests.engine_helpers import (
    Recorder,
    req,
)


class WakeRecorder(Recorder):
    """Records, per step handed over, whether the writer was woken at once (``call``)."""

    def __init__(self) -> None:
        super().__init__()
        self.woken: list = []

    def defer(self, fn, *args) -> None:
        self.woken.append(False)
        super().defer(fn, *args)

    def call(self, fn, *args) -> None:
        self.woken.append(True)
        super().defer(fn, *args)


def test_the_writer_is_woken_at_once_for_a_step_where_a_row_ends():
    # Caps 2 and 4, and EOS 7 for the third row at step 3: only steps 2, 3 and 4 can end a row.
    # A closed-loop user waits on that row's "done"; other steps wait for the writer's period.
    out = WakeRecorder()
    s = StepStreamer([req(1, 2), req(2, 4), req(3, 4, eos=7)], out, set(), set())
    s.put(torch.tensor([[0], [0], [0]]))
    for tokens in ([5, 5, 5], [5, 5, 5], [5, 5, 7], [5, 5, 5]):
        s.put(torch.tensor(tokens))
    assert out.woken == [False, True, True, True]
    assert [m[2:] for m in out.msgs if m[0] == "done"] == [(1, 2), (3, 3), (2, 4)]


class GatedConn:
    """A pipe end whose first write blocks until released: later messages queue up meanwhile."""

    def __init__(self) -> None:
        self.sent: list = []
        self.release = threading.Event()
        self.first_write = threading.Event()

    def send(self, msg) -> None:
        if not self.sent:
            self.first_write.set()
            assert self.release.wait(10)
        self.sent.append(msg)


def test_outbox_keeps_order_and_coalesces_what_queued_during_a_write():
    conn = GatedConn()
    box = Outbox(conn)
    box.send(("a",))
    assert conn.first_write.wait(10)  # the writer is inside its first write
    for i in range(5):
        box.send(("b", i))
    conn.release.set()
    box.close()
    assert conn.sent == [("a",), ("many", [("b", 0), ("b", 1), ("b", 2), ("b", 3), ("b", 4)])]


def test_deferred_work_runs_on_the_writer_in_order_with_plain_messages():
    sent, threads = [], set()

    class Conn:
        def send(self, msg):
            sent.extend(msg[1] if msg[0] == "many" else [msg])

    def step(i):
        threads.add(threading.current_thread().name)
        return [("tokens", i)]

    box = Outbox(Conn(), period_s=0.001)
    box.send(("admitted",))
    for i in range(50):
        box.defer(step, i)
    box.call(lambda: [("done",)])
    box.flush()
    assert sent == [("admitted",)] + [("tokens", i) for i in range(50)] + [("done",)]
    assert threads == {"loadtest-outbox"}
    box.defer(step, 50)  # the writer sleeps now: a deferral wakes it
    box.flush(timeout=10)
    assert sent[-1] == ("tokens", 50)
    box.close()


@pytest.mark.integration
def test_a_failing_deferred_call_ends_the_worker_process(tmp_path):
    import subprocess
    import sys

    code = (
        "from loadtest.backends.transformers.outbox import Outbox\n"
        "import time\n"
        "class C:\n    def send(self, m): pass\n"
        "box = Outbox(C())\nbox.call(lambda: 1 / 0)\ntime.sleep(30)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 70 and "ZeroDivisionError" in p.stderr


def test_outbox_close_returns_when_the_parent_is_gone():
    class Broken:
        def send(self, msg):
            raise BrokenPipeError

    box = Outbox(Broken())
    box.send(("a",))
    box.close(timeout=10)
    assert not box._thread.is_alive()


def test_parent_unpacks_coalesced_messages_in_order():
    from loadtest.backends.transformers.pipe import WorkerPipe

    async def go():
        b = WorkerPipe()
        b.queues = {1: asyncio.Queue(), 2: asyncio.Queue()}
        b._on_message(
            (
                "many",
                [
                    ("tokens", (100,), [1, 2]),
                    ("done", 100, 1, 1),
                    ("tokens", (200,), [2]),
                    ("done", 200, 2, 2),
                    ("warmed", 1.5, {"compile_s": 0.0, "gc_s": 0.0}),
                ],
            )
        )
        got = {rid: [q.get_nowait() for _ in range(q.qsize())] for rid, q in b.queues.items()}
        return got, b.reply.get_nowait()

    got, reply = asyncio.run(go())
    assert got[1] == [Tokens((100,)), Finished(100, 1)]
    assert got[2] == [Tokens((100,)), Tokens((200,)), Finished(200, 2)]
    assert reply == ("warmed", 1.5, {"compile_s": 0.0, "gc_s": 0.0})


@pytest.mark.parametrize("n", [1, 3])
def test_close_flushes_everything(n):
    got = []

    class Conn:
        def send(self, msg):
            got.extend(msg[1] if msg[0] == "many" else [msg])

    box = Outbox(Conn())
    for i in range(200 * n):
        box.send(("m", i))
    box.close()
    assert got == [("m", i) for i in range(200 * n)]


# -- stamp sources: after generate()'s own sync (default) and the streamer (fallback) ------------
