"""Answers under load compared with the same requests' answers alone (``answers:``).

The reference pass (``reference_pass``) sends a sample of the run's own planned requests before
t0, one at a time, greedy, and keeps each answer's text in memory (never in a file). Under load
the same requests' answers come back with their ends and are compared as they are recorded, off
the send path: equal or not, and where they first part (a character position). The result
keeps counts and positions, never the texts."""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from loadtest.core.errors import BackendError
from loadtest.core.events import Cancelled, Failed, Finished
from loadtest.core.text import visible

if TYPE_CHECKING:
    from loadtest.backends.base import Backend
    from loadtest.config.scenario import Scenario
    from loadtest.execution.request import RequestState
    from loadtest.workload.plan import Plan
    from loadtest.workload.requests import PlannedRequest
    from loadtest.workload.tokenizer import Tokenizer

AnswerKey = tuple[int, int | None, int, int, str | None, int | None]
CLOSED_LOOP_CANDIDATES = 2_000  # a closed loop's first requests, the sample drawn from them
REFERENCE_TIMEOUT_S = 120.0  # one reference request's longest wait (load.request_timeout first)


def answer_key(req: PlannedRequest) -> AnswerKey:
    """What makes a request's prompt and answer the same as another's: its prompt (seed, row,
    prefix group), its lengths and its model."""
    return (
        req.prompt_seed,
        req.dataset_row,
        req.input_tokens,
        req.output_tokens,
        req.model,
        req.prefix_group,
    )


@dataclass
class Tally:
    compared: int = 0
    matched: int = 0


@dataclass
class AnswerCheck:
    """The references, and the comparisons under load so far."""

    references: dict[AnswerKey, str]
    reference_s: float  # the reference pass's time, seconds
    keys: frozenset[AnswerKey] = frozenset()
    whole: Tally = field(default_factory=Tally)
    unanswered: int = 0  # compared requests that failed, or were cut, under load
    positions: list[int] = field(default_factory=list)  # of each diverged answer, characters
    by_endpoint: dict[str, Tally] = field(default_factory=dict)
    by_model: dict[str, Tally] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.keys = frozenset(self.references)

    def wants(self, req: PlannedRequest) -> bool:
        return answer_key(req) in self.keys

    def observe(self, st: RequestState) -> None:
        """A finished request: compared where it is one of the references'."""
        reference = self.references.get(answer_key(st.req))
        if reference is None:
            return
        if st.error is not None or st.cancelled or st.reply is None:
            self.unanswered += 1
            return
        matched = st.reply == reference
        tallies = [self.whole]
        if st.endpoint is not None:
            tallies.append(self.by_endpoint.setdefault(st.endpoint, Tally()))
        if st.req.model is not None:
            tallies.append(self.by_model.setdefault(st.req.model, Tally()))
        for t in tallies:
            t.compared += 1
            t.matched += matched
        if not matched:
            self.positions.append(len(os.path.commonprefix([st.reply, reference])))


def candidates(scenario: Scenario, plan: Plan) -> list[PlannedRequest]:
    """The requests the sample is drawn from: the plan's measured ones (an open loop's, fixed
    before t0); a closed loop's first ones, made by a twin of the run's own request source
    (the same seeds give the same requests, in the same order)."""
    if plan.closed_loop is None:
        return [r for r in plan.requests if not r.warmup]
    from loadtest.workload.requests import RequestSource

    twin = RequestSource(scenario, plan.dataset)
    n = min(plan.planned_count or CLOSED_LOOP_CANDIDATES, CLOSED_LOOP_CANDIDATES)
    warm = plan.warmup_requests or 0
    made = [twin.next(i, None, i < warm) for i in range(n)]
    return [r for r in made if not r.warmup] or made


async def reference_pass(
    scenario: Scenario, plan: Plan, backend: Backend, tokenizer: Tokenizer
) -> AnswerCheck:
    """Each sampled request sent alone, in turn, before the run: its answer's text kept. The
    sample: ``answers.sample`` (a count or a share), else as many as fit in ``answers.budget``
    of the window (at least ``min_sample``). A reference the server refuses stops the start."""
    spec = scenario.answers
    assert spec is not None
    pool = candidates(scenario, plan)
    random.Random(f"{scenario.seeds.prompts}/answers").shuffle(pool)
    sample = spec.sample
    want = (
        len(pool)
        if sample is None
        else max(1, round(sample * len(pool)))
        if isinstance(sample, float) and sample <= 1
        else int(sample)
    )
    want = min(want, len(pool))
    timeout = (scenario.load.request_timeout or REFERENCE_TIMEOUT_S * 1e9) / 1e9
    references: dict[AnswerKey, str] = {}
    started = time.monotonic()
    for req in pool[:want]:
        if sample is None and len(references) >= spec.min_sample:
            spent = time.monotonic() - started
            per = spent / len(references)
            if spent + per > spec.budget * _window_s(scenario, plan, per):
                break
        key = answer_key(req)
        if key in references:
            continue
        try:
            text = await asyncio.wait_for(_alone(backend, plan, tokenizer, req), timeout)
        except asyncio.TimeoutError:
            raise BackendError(
                f"answers: the reference pass's request {req.index} took over {timeout:g} s"
            ) from None
        references[key] = text
    return AnswerCheck(references, time.monotonic() - started)


def _window_s(scenario: Scenario, plan: Plan, per_request_s: float) -> float:
    """The measured window's length, or, for a request count, its planned span (an open
    loop's offsets; a closed loop's requests at the reference pace over its users)."""
    load = scenario.load
    if load.duration is not None:
        return load.duration / 1e9
    measured = [r.offset_ns for r in plan.requests if not r.warmup and r.offset_ns is not None]
    if measured:
        return max(per_request_s, (max(measured) - min(measured)) / 1e9)
    users = plan.closed_loop.users if plan.closed_loop is not None else 1
    return (plan.measured_requests or 1) * per_request_s / max(1, users)


async def _alone(backend: Backend, plan: Plan, tokenizer: Tokenizer, req: PlannedRequest) -> str:
    """One request's answer text, sent alone (as a warm-up one: its figures are no one's)."""
    alone = replace(req, keep_answer=True, warmup=True)
    ids = plan.prompt_ids(alone, tokenizer) if backend.needs_prompt_ids else None
    text: str | None = None
    stream = backend.submit(alone, ids)
    try:
        async for event in stream:
            if isinstance(event, Failed):
                raise BackendError(
                    f"answers: the server refused the reference pass's request {req.index} "
                    f"({event.error_type}): {visible(event.message[:200])}"
                )
            if isinstance(event, Cancelled):
                break
            if isinstance(event, Finished):
                text = event.text
    finally:
        await stream.aclose()
    if text is None:
        raise BackendError(f"answers: the reference pass's request {req.index} gave no text")
    return text
