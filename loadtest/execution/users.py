"""Closed-loop users and multi-turn sessions, as the runner drives them: each user sends its next
request ``think`` after its previous response; each session sends its turns in order, ``turn_think``
after the previous reply, its prompt the conversation so far. The runner's own dispatch, request
driving and recording are in ``runner``; the runner holds its users, which send through it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from loadtest.workload.requests import PlannedRequest
from loadtest.workload.sessions import Conversation

if TYPE_CHECKING:
    from loadtest.backends.base import Backend
    from loadtest.core.clock import Clock
    from loadtest.execution.recorder import Recorder
    from loadtest.execution.request import RequestState
    from loadtest.workload.plan import Plan
    from loadtest.workload.tokenizer import Tokenizer

T = TypeVar("T")


@dataclass
class SessionCounts:
    """Multi-turn sessions: how they went, for the result's ``sessions`` section."""

    started: int = 0
    completed: int = 0  # every planned turn answered
    ended_by_failure: int = 0  # a failed turn ends its session (its history is broken)
    ended_by_cancel: int = 0  # a cancelled turn (load.cancel) ends its session: the user left
    cut_at_window_end: int = 0  # the next turn fell after the window's end, so was not sent
    turns_sent: int = 0
    stand_in_replies: int = 0  # the backend gave no text: a same-length stand-in was used


class Sender(Protocol):
    """What users need from the runner: the run's origin and recorder, the rate ceiling, and
    a request driven to its end (or a session, started beside the others)."""

    def origin(self) -> tuple[int, Recorder]: ...

    async def throttle(self) -> int: ...

    def spawn(self, coro: Coroutine[Any, Any, T], request: bool = True) -> asyncio.Task[T]: ...

    async def drive(
        self,
        req: PlannedRequest,
        intended: int,
        held_until: int,
        prompt_ids: list[int] | None = None,
        slot_free_ns: int | None = None,
    ) -> RequestState: ...


class Users:
    """Closed-loop users and multi-turn sessions: each sends its next request when its last
    answer came (and its think time passed), through the runner that ``sender`` is."""

    def __init__(
        self, plan: Plan, clock: Clock, backend: Backend, tokenizer: Tokenizer, sender: Sender
    ) -> None:
        self.plan, self.clock, self.backend, self.tokenizer = plan, clock, backend, tokenizer
        self.sender = sender
        cl = plan.closed_loop
        # one seeded stream, all users
        self._think_times = cl.think_times_ns(plan.think_rng) if cl and plan.think_rng else None
        self._turn_think = (
            plan.turn_think.times_ns(plan.turn_think_rng)
            if plan.turn_think is not None and plan.turn_think_rng is not None
            else None
        )
        self.sessions = SessionCounts() if plan.multi_turn else None
        self._session_ids = itertools.count(*plan.stride)

    async def dispatch_closed(self) -> None:
        """Every user, until the window ends or the plan's count is reached."""
        cl = self.plan.closed_loop
        assert cl is not None
        counter = itertools.count(*self.plan.stride)
        users = [asyncio.create_task(self._user(counter)) for _ in range(cl.users)]
        try:
            await asyncio.gather(*users)
        finally:
            for u in users:
                u.cancel()

    async def _user(self, counter: Iterator[int]) -> None:
        plan = self.plan
        t0, rec = self.sender.origin()
        assert plan.source is not None and self._think_times is not None  # a closed-loop plan
        end = None if plan.window_end_ns is None else t0 + plan.window_end_ns
        intended = t0
        while True:
            if end is not None and intended >= end:
                return
            index = next(counter)
            if plan.planned_count is not None and index >= plan.planned_count:
                return
            warmup = (
                (intended - t0 < plan.warmup_ns)
                if plan.warmup_ns is not None
                else index < (plan.warmup_requests or 0)
            )
            if plan.multi_turn:
                turns = plan.source.next_session(index, None, warmup, next(self._session_ids))
                after = await self.session(turns, intended, counter, first_index=index)
                if after is None:
                    return
                intended = after + next(self._think_times)
                continue
            req = plan.source.next(index, None, warmup)
            await self.clock.sleep_until(intended)
            held_until = await self.sender.throttle()
            if not warmup:
                if rec.window.start is None:
                    self.backend.window_started()  # a count-based window opens with its first request
                rec.window.open_at(intended)
            task = self.sender.spawn(self.sender.drive(req, intended, held_until))
            st = await asyncio.shield(task)  # a cancelled user leaves its request to the drain
            intended = max(st.done_ns or self.clock.now_ns(), intended) + next(self._think_times)

    async def session(
        self,
        turns: list[PlannedRequest],
        intended: int,
        counter: Iterator[int] | None,
        first_index: int | None = None,
        slot_free_ns: int | None = None,
    ) -> int | None:
        """One multi-turn session: each turn sent ``turn_think`` after the previous reply, its
        prompt the history so far. A session belongs to the phase (warm-up or measured) of its
        first turn. Closed loop (``counter``): turns take their indexes from the users' counter;
        returns when the session ended, or None when the plan's request count is reached.
        ``slot_free_ns``: under an in-flight cap, when the session's slot came free; it holds
        it to its end, so only its first turn waits for it."""
        plan, counts = self.plan, self.sessions
        assert counts is not None and self._turn_think is not None  # a multi-turn plan
        t0, rec = self.sender.origin()
        end = None if plan.window_end_ns is None else t0 + plan.window_end_ns
        conversation = Conversation(plan, self.tokenizer, turns[0])
        counts.started += 1
        for k, planned in enumerate(turns):
            if k:
                if end is not None and intended >= end:
                    counts.cut_at_window_end += 1
                    return intended
                index = planned.index if counter is None else next(counter)
                if counter is not None and plan.planned_count is not None:
                    if index >= plan.planned_count:  # the count-based window is full
                        counts.cut_at_window_end += 1
                        return None
                planned = replace(planned, index=index)
            elif first_index is not None:
                planned = replace(planned, index=first_index)
            req, prompt_ids = conversation.turn(planned)
            await self.clock.sleep_until(intended)
            held_until = await self.sender.throttle()
            if counter is not None and not req.warmup:
                if rec.window.start is None:
                    self.backend.window_started()
                rec.window.open_at(intended)
            counts.turns_sent += 1
            slot = slot_free_ns if not k or slot_free_ns is None else 0  # held since turn 0
            task = self.sender.spawn(
                self.sender.drive(req, intended, held_until, prompt_ids, slot_free_ns=slot)
            )
            st = await asyncio.shield(task)  # cancelled: the turn is left to the drain
            if st.error is not None:
                counts.ended_by_failure += 1
                return max(st.done_ns or self.clock.now_ns(), intended)
            if st.cancelled:  # the user left mid-answer: the conversation ends there
                counts.ended_by_cancel += 1
                return max(st.done_ns or self.clock.now_ns(), intended)
            counts.stand_in_replies += st.reply is None
            conversation.reply(req, st.reply, st.token_count)
            intended = max(st.done_ns or self.clock.now_ns(), intended)
            if k + 1 < len(turns):
                intended += next(self._turn_think)
        counts.completed += 1
        return intended
