"""``answers:``: each answer under load checked against the same prompt's answer alone.

Before the measured window (never inside it), a reference pass sends a sample of the run's own
requests one at a time, greedy; under load the same requests' answers are compared with those
references. Two answers to one greedy prompt that differ show a server whose output depends on
what else it was serving (batch composition, a scheduler or kernel change under pressure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from loadtest.config.spec import Problem
from loadtest.config.types import StrictModel

if TYPE_CHECKING:
    from loadtest.config.backend_specs import BackendSpec
    from loadtest.config.workload import Workload

MAX_SAMPLE = 10_000


class Answers(StrictModel):
    """The answer-consistency check: which requests, and what it may cost."""

    sample: int | float | None = Field(
        None,
        gt=0,
        description="The measured requests compared: a count (50), or a share of them (0.05). "
        "Default: as many as the reference pass sends within `budget` of the window.",
    )
    budget: float = Field(
        0.03,
        gt=0,
        le=1,
        description="With no sample: the reference pass stops once it has taken this share of "
        "the measured window's length (a request count's window: of the requests' planned "
        "time at the reference pass's own pace). The result says what it cost.",
    )
    min_sample: int = Field(
        5, ge=1, le=MAX_SAMPLE, description="With no sample: at least this many, whatever it costs."
    )


def answers_problems(
    answers: Answers | None,
    backend: BackendSpec,
    workload: Workload,
    one_process: bool,
    cancels: bool,
) -> list[Problem]:
    """What the answer check cannot go with: it reads served answers' text (kind: openai),
    in one client process, of requests whose prompts are fixed before the run (no sessions,
    whose turns carry the replies), neither cancelled nor sampled (greedy)."""
    if answers is None:
        return []
    where = ("answers",)
    problems: list[Problem] = []
    if backend.kind != "openai":
        problems.append(
            (
                where,
                f"answers are compared on served models (kind: openai), not kind: {backend.kind}",
            )
        )
        return problems
    api = getattr(backend, "api", None)
    if api not in ("chat", "completions", "responses"):
        problems.append((where, f"api: {api} gives no answer text to compare"))
    if not one_process:
        problems.append((where, "answers are compared in one client process (workers: 1)"))
    if workload.multi_turn is not None:
        problems.append(
            (where, "a session's turns carry its earlier replies: their prompts are not fixed")
        )
    if cancels:
        problems.append((where, "a cancelled request's answer is cut: give no load.cancel"))
    temperature = getattr(backend, "extra_body", {}).get("temperature")
    if temperature not in (None, 0, 0.0):
        problems.append(
            (
                ("backend", "extra_body", "temperature"),
                f"answers compare greedy answers: temperature {temperature!r} samples "
                "(give 0, or leave it out: the check sends 0)",
            )
        )
    return problems
