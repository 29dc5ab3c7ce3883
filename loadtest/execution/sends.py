"""What the requests of a run are sent through (``users.Sender``): the run's origin, the
max_rate ceiling, each request driven in a task of its own, and the tasks in flight; and the
open-loop dispatcher, which walks the plan on absolute intended times."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from loadtest.core.clock import Clock
from loadtest.execution.driver import RequestDriver
from loadtest.execution.in_flight_cap import InFlightCap
from loadtest.execution.rate_ceiling import RateCeiling
from loadtest.execution.recorder import Recorder

if TYPE_CHECKING:
    from loadtest.execution.users import Users
    from loadtest.workload.plan import Plan

T = TypeVar("T")


class Sends:
    """A run's sending side, shared by its open-loop dispatcher and its users."""

    def __init__(
        self, requests: RequestDriver, ceiling: RateCeiling | None, cap: InFlightCap | None
    ) -> None:
        self.requests = requests
        self.drive = requests.drive
        self.ceiling = ceiling  # a ceiling on top of the schedule, not the schedule
        self.cap = cap  # an open loop's cap on what is in flight (load.max_in_flight)
        self.tasks: set[asyncio.Task] = set()
        self.next_due_ns: int | None = None  # the open-loop dispatcher's next deadline
        self._origin: tuple[int, Recorder] | None = None

    def start(self, t0: int, recorder: Recorder) -> None:
        self._origin = t0, recorder

    def origin(self) -> tuple[int, Recorder]:
        """t0 and the recorder: set before anything is dispatched."""
        assert self._origin is not None
        return self._origin

    @property
    def held(self) -> int:
        """Sends the ceiling held."""
        return 0 if self.ceiling is None else self.ceiling.held

    async def throttle(self) -> int:
        """Wait for the max_rate ceiling; returns the last time any send was held by it."""
        return 0 if self.ceiling is None else await self.ceiling.throttle()

    def spawn(self, coro: Coroutine[Any, Any, T], request: bool = True) -> asyncio.Task[T]:
        """Start a request (``drive``: unstarted until its first step runs) or a session."""
        self.requests.unstarted += request
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def cancel_all(self) -> None:
        """Every task in flight cancelled, and waited for."""
        tasks = list(self.tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def slot(self) -> int | None:
        """Wait for an in-flight slot (``load.max_in_flight``): when it came free (0: never
        held), or None where the run has no cap. Recording may use the wait: no send is due
        before a request ends."""
        if self.cap is None:
            return None
        due, self.next_due_ns = self.next_due_ns, None
        try:
            return await self.cap.acquire()
        finally:
            self.next_due_ns = due

    async def in_slot(self, coro: Coroutine[Any, Any, T]) -> T:
        """``coro`` holding its slot to its end."""
        assert self.cap is not None
        try:
            return await coro
        finally:
            self.cap.release()

    async def open_loop(self, plan: Plan, clock: Clock, users: Users) -> None:
        """Each request (or multi-turn session) at ``t0 + offset``: an absolute time, never a
        relative sleep, so lateness never accumulates; under a cap, in the plan's order as
        slots free."""
        t0, _ = self.origin()
        capped = self.cap is not None
        if plan.multi_turn:
            for turns in plan.sessions():
                assert turns[0].offset_ns is not None  # a session starts at its arrival
                intended = t0 + turns[0].offset_ns
                await clock.sleep_until(intended)
                free = await self.slot() if capped else None
                session = users.session(turns, intended, None, slot_free_ns=free)
                self.spawn(self.in_slot(session) if capped else session, request=False)
            return
        try:
            for req in plan.requests:
                assert req.offset_ns is not None  # an open-loop plan places every request
                intended = self.next_due_ns = t0 + req.offset_ns
                await clock.sleep_until(intended)
                held_until = await self.throttle()
                free = await self.slot() if capped else None  # no coroutine a send uncapped
                drive = self.drive(req, intended, held_until, slot_free_ns=free)
                self.spawn(self.in_slot(drive) if capped else drive)
        finally:
            self.next_due_ns = None
