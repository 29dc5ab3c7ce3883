"""The harness's hold on a tensor-parallel group's follower ranks (ranks 1..n-1).

Rank 0 is the engine the harness speaks to through its pipes; the followers take their batches
from rank 0 (``parallel``), so the harness only starts them, watches them and ends them. Each
is watched by a thread that waits for its exit: a follower that leaves early takes the group
with it (the owner is told at once, with the follower's last words where it could say any).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext, SpawnProcess

from loadtest.backends.transformers.layout import Layout
from loadtest.config.transformers_spec import TransformersSpec

JOIN_S = 5.0  # a follower told to stop (by rank 0) has this long to exit before it is killed


class Followers:
    """Start, watch and end a group's follower processes."""

    def __init__(self, on_exit: Callable[[int, int | None, str | None], None]) -> None:
        self.on_exit = on_exit  # (rank, exit code, last words), called on the event loop
        self.procs: list[SpawnProcess] = []

    def start(
        self,
        ctx: SpawnContext,
        loop: asyncio.AbstractEventLoop,
        spec: TransformersSpec,
        base_dir: str,
        layout: Layout,
        label: str,
    ) -> None:
        """Spawn rank ``layout.rank``: no pipe from the harness, one back for its last words."""
        from loadtest.backends.transformers.follower_rank import follower_main

        said, says = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=follower_main,
            args=(spec, base_dir, layout, says),
            daemon=True,
            name=f"loadtest-engine{label}-rank{layout.rank}",
        )
        proc.start()
        says.close()
        self.procs.append(proc)
        threading.Thread(
            target=self._watch,
            args=(proc, said, layout.rank, loop),
            daemon=True,
            name=f"loadtest-engine{label}-rank{layout.rank}-watch",
        ).start()

    def _watch(
        self,
        proc: SpawnProcess,
        said: Connection,
        rank: int,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        proc.join()  # a thread of its own: waiting here blocks nothing else
        try:
            words = said.recv() if said.poll(1.0) else None
        except (EOFError, OSError):  # it said nothing (killed): its exit code speaks
            words = None
        try:
            loop.call_soon_threadsafe(self.on_exit, rank, proc.exitcode, words)
        except RuntimeError:  # the event loop closed first (the run is over): nobody to tell
            pass

    async def stop(self) -> None:
        """Wait for each to exit (rank 0's stop reaches them), killing any that does not."""
        for proc in self.procs:
            await asyncio.to_thread(proc.join, JOIN_S)
            if proc.is_alive():
                proc.kill()
                await asyncio.to_thread(proc.join, JOIN_S)
