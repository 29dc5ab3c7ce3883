"""``kind: sim``: a simulated FIFO server, the harness's test double and a dry-run mode.

``max_concurrency`` slots, handed out first come first served. With a slot, the first token
comes ``prefill_ms_per_token × input_tokens`` later, then one token every
``decode_ms_per_token``. During a stall nothing progresses: the server's work clock stops, so
every deadline inside or after a stall moves out by the stall's overlap. Every ``fail_every``-th
submitted request fails with ``SimulatedFailure``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator

from loadtest.backends.base import Backend, BackendContext, BackendInfo, Facts
from loadtest.config.backend_specs import SimSpec
from loadtest.config.observing import Profile
from loadtest.core.clock import Clock
from loadtest.core.events import Admitted, BackendEvent, Cancelled, Failed, Finished, Tokens
from loadtest.workload.requests import PlannedRequest
from loadtest.workload.tokenizer import ByteTokenizer


class WorkClock:
    """Maps wall time (ns from t0) to work time (wall time minus stalled time) and back."""

    def __init__(self, stalls: list[tuple[int, int]]) -> None:
        self.stalls = sorted(stalls)

    def work_at(self, wall: int) -> int:
        """How much work has been done by wall time ``wall``: the wall time less the stalls before it."""
        stalled = sum(max(0, min(wall, s + d) - s) for s, d in self.stalls)
        return wall - stalled

    def wall_at(self, work: int) -> int:
        """The earliest wall time at which ``work`` has been done."""
        wall = work
        for s, d in self.stalls:
            if wall > s:  # the target lies after this stall began: it moves out by the stall
                wall += d
        return wall


class SimBackend(Backend[SimSpec]):
    """A simulated server on the runner's clock: slots, per-token times, stalls and failures."""

    needs_prompt_ids = False

    def __init__(self, spec: SimSpec, clock: Clock, context: BackendContext | None = None) -> None:
        super().__init__(spec, clock, context or BackendContext())
        self._free = spec.max_concurrency
        self._waiters: deque[asyncio.Future] = deque()
        self._submitted = 0
        self._origin: int | None = None
        self._work = WorkClock([(s.at, s.for_) for s in spec.stalls])
        self._prefill_ns = round(spec.prefill_ms_per_token * 1e6)
        self._decode_ns = round(spec.decode_ms_per_token * 1e6)
        self._kv_in_use = 0

    def set_origin(self, t0_ns: int) -> None:
        """Stalls are placed relative to t0 (``at: 10s`` = ten seconds into the schedule)."""
        self._origin = t0_ns

    async def reconfigure(self, spec: SimSpec) -> bool:
        """Everything about the simulated server can change between points, once idle."""
        if self._waiters or self._free != self.spec.max_concurrency:
            return False
        SimBackend.__init__(self, spec, self.clock, self.context)  # a fresh simulated server
        return True

    async def start(self) -> BackendInfo:
        return BackendInfo(
            "sim", ByteTokenizer(), {"spec": self.spec.model_dump(mode="json", by_alias=True)}
        )

    async def stop(self) -> Facts:
        return {}

    supports_profiling = True  # a simulated one: records nothing, or fails as the spec says

    async def profile_start(self, options: Profile) -> str | None:
        if self.spec.profiler == "absent":
            return "POST /start_profile: HTTP 404 (simulated: no profiler)"
        return None

    async def profile_stop(self, out_dir: str) -> Facts:
        if self.spec.profiler == "hangs":
            await asyncio.Event().wait()  # never answers: the window's call_timeout bounds it
        return {"profiler": "the simulated server's (records nothing)"}

    async def submit(
        self, req: PlannedRequest, prompt_ids: list[int] | None
    ) -> AsyncGenerator[BackendEvent | Cancelled, None]:
        self._submitted += 1
        if self.spec.fail_every and self._submitted % self.spec.fail_every == 0:
            yield Failed(
                self.clock.now_ns(),
                "SimulatedFailure",
                f"request {req.index}: fail_every={self.spec.fail_every}",
            )
            return
        await self._acquire()
        need = req.input_tokens + req.output_tokens
        cap = self.spec.kv_capacity_tokens
        try:
            if cap is not None and self._kv_in_use + need > cap:
                yield Failed(
                    self.clock.now_ns(),
                    "CudaOOM",
                    f"simulated KV cache: {self._kv_in_use} + {need} > {cap} tokens",
                )
                return
            self._kv_in_use += need
            try:
                async for event in self._serve(req):
                    yield event
            finally:
                self._kv_in_use -= need
        finally:
            self._release()

    async def _serve(self, req: PlannedRequest) -> AsyncGenerator[BackendEvent, None]:
        origin = self._origin if self._origin is not None else 0
        now = self.clock.now_ns()
        yield Admitted(now)
        work = self._work.work_at(now - origin) + self._prefill_ns * req.input_tokens
        for i in range(req.output_tokens):
            if i:
                work += self._decode_ns
            await self.clock.sleep_until(origin + self._work.wall_at(work))
            yield Tokens((self.clock.now_ns(),))
        yield Finished(self.clock.now_ns(), req.output_tokens, req.input_tokens)

    async def _acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut  # the releaser hands its slot over directly: strict FIFO
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release()  # the slot was handed over just as we were cancelled: pass it on
            # else: a cancelled future stays in the deque; _release skips it (O(1), not O(n))
            raise

    def _release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1
