"""Client workers as processes on this host: spawned, never forked (the coordinator holds
threads), each spoken to through a pipe, all reading the same monotonic clock."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess

from loadtest.config.loading import LoadedScenario
from loadtest.core.loop import read_pipe_on_loop
from loadtest.execution.clock_sync import SAME_CLOCK, ClockOffset
from loadtest.execution.worker_side import send, worker_main
from loadtest.execution.workers import Channel, Post


class ProcessChannel:
    """A worker process on this host (spawned, never forked: the coordinator holds threads),
    spoken to through a pipe; it reads the same monotonic clock."""

    def __init__(self, loaded: LoadedScenario, index: int, count: int) -> None:
        self.loaded, self.index, self.count = loaded, index, count
        self.where: dict = {}
        self._proc: SpawnProcess | None = None
        self._conn: Connection | None = None

    async def open(self, post: Post) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent_end, child_end = ctx.Pipe()
        self._proc = ctx.Process(
            target=worker_main,
            args=(child_end, self.loaded, self.index, self.count),
            name=f"loadtest-worker-{self.index}",
            daemon=True,
        )
        self._proc.start()
        child_end.close()
        self._conn = parent_end
        self.where = {"pid": self._proc.pid}
        read_pipe_on_loop(parent_end.fileno(), self._readable, post)

    def _readable(self, post: Post) -> None:
        conn, proc, loop = self._conn, self._proc, asyncio.get_running_loop()
        assert conn is not None and proc is not None  # open() made both before reading
        try:
            while conn.poll():
                post(conn.recv())
        except (EOFError, OSError):
            loop.remove_reader(conn.fileno())
            proc.join(1.0)
            post(("exited", f"exited (code {proc.exitcode}) without a result"))

    async def sync_clock(self) -> ClockOffset:
        return SAME_CLOCK  # one host, one monotonic clock

    def send(self, msg: tuple) -> None:
        assert self._conn is not None  # opened
        send(self._conn, msg)

    def kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()

    async def close(self, grace_s: float) -> None:
        if self._proc is None:
            return
        self.send(("stop", "closed", None))
        await asyncio.to_thread(self._proc.join, grace_s)
        if self._proc.is_alive():
            self._proc.kill()
            await asyncio.to_thread(self._proc.join, 1.0)
        assert self._conn is not None  # opened with the process
        with contextlib.suppress(OSError, ValueError):
            asyncio.get_running_loop().remove_reader(self._conn.fileno())
        self._conn.close()
        self._proc = None


def process_channels(loaded: LoadedScenario) -> list[Channel]:
    n = loaded.scenario.load.workers
    return [ProcessChannel(loaded, i, n) for i in range(n)]
