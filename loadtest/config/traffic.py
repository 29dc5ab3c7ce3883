"""Traffic that is more than arrivals and lengths: clients that cancel, and checks on what a
trace, a cancellation or a model mix can go with."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from loadtest.config.arrivals import Arrival, TraceArrival
from loadtest.config.spec import Problem
from loadtest.config.types import PositiveDuration, StrictModel

if TYPE_CHECKING:
    from loadtest.config.backend_specs import BackendSpec
    from loadtest.config.workload import Workload


class Cancel(StrictModel):
    """A seeded share of requests the client cancels mid-stream (it closes the connection), as
    users abandon chats: counted as cancelled, not failed, their partial figures kept apart."""

    fraction: float = Field(gt=0, le=1, description="Share of requests cancelled (seeded).")
    after: PositiveDuration | None = Field(
        None, description="Cancel this long after the request's intended send."
    )
    after_tokens: int | None = Field(
        None, ge=1, le=10_000_000, description="Cancel once this many output tokens arrived."
    )

    @model_validator(mode="after")
    def _one_trigger(self):
        if (self.after is None) == (self.after_tokens is None):
            raise ValueError("give exactly one of after or after_tokens")
        return self


def traffic_problems(
    backend: BackendSpec, workload: Workload, arrival: Arrival, cancel: Cancel | None
) -> list[Problem]:
    """What a trace's lengths (``arrival``), a cancellation or a model mix cannot go with."""
    problems: list[Problem] = []
    if isinstance(arrival, TraceArrival) and arrival.carries_lengths:
        for name, what in (
            ("dataset", "a dataset's prompts"),
            ("shared_prefix", "shared prefixes"),
            ("multi_turn", "sessions"),
        ):
            if getattr(workload, name) is not None:
                problems.append(
                    (
                        ("workload", name),
                        f"a {arrival.format} trace gives each request's lengths: it cannot "
                        f"take {what} too (or set load.arrival.lengths: workload)",
                    )
                )
    api = getattr(backend, "api", None)
    if cancel is not None and cancel.after_tokens is not None and api in ("embeddings", "rerank"):
        problems.append(
            (
                ("load", "cancel", "after_tokens"),
                f"api: {api} streams no tokens: cancel after a time",
            )
        )
    elif (
        cancel is not None
        and cancel.after_tokens is not None
        and not getattr(backend, "stream", True)
    ):
        problems.append(
            (
                ("load", "cancel", "after_tokens"),
                "backend.stream: false: no token arrives before the whole answer; cancel "
                "after a time",
            )
        )
    if workload.models is not None and backend.kind not in ("openai", "sim"):
        problems.append(
            (
                ("workload", "models"),
                f"a model mix needs a server that serves several (kind: openai), not kind: "
                f"{backend.kind}, which runs one",
            )
        )
    return problems
