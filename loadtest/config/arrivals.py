"""Arrival processes: when requests are sent (constant, Poisson, gamma, a ramp, steps, a closed
loop of users, a burst at t0, a trace), each by ``kind``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from loadtest.config.types import Duration, PositiveDuration, Rate, StrictModel

_Model = StrictModel

MAX_USERS = 100_000  # a typo (1e9 users) must not exhaust memory before anything runs
MAX_CV = 100.0
MIN_CV = 0.01  # gaps this regular are constant arrivals; below it gamma's shape overflows


class ConstantArrival(_Model):
    """Open loop: one request every 1/rate seconds."""

    kind: Literal["constant"]
    rate: Rate = Field(description="Requests per second, evenly spaced.")


class PoissonArrival(_Model):
    """Open loop: exponential gaps at the given mean rate."""

    kind: Literal["poisson"]
    rate: Rate = Field(description="Mean requests per second; exponential gaps.")


class GammaArrival(_Model):
    """Open loop: gamma gaps at the given rate and coefficient of variation (burstier when cv > 1)."""

    kind: Literal["gamma"]
    rate: Rate = Field(description="Mean requests per second.")
    cv: float = Field(
        ge=MIN_CV,
        le=MAX_CV,
        description="Burstiness: coefficient of variation of the gaps (1 = Poisson).",
    )


class ConcurrencyArrival(_Model):
    """Closed loop: a fixed number of users, each sending after its last response (plus think time)."""

    kind: Literal["concurrency"]
    users: int = Field(
        ge=1,
        le=MAX_USERS,
        description="Closed loop: this many users, each sends when its last request is done.",
    )
    think_time: Duration = Field(
        0, description="Pause between a user's response and its next request."
    )
    think: Literal["fixed", "exponential"] = Field(
        "fixed", description="Think time fixed, or exponential with that mean."
    )


class BurstArrival(_Model):
    """Everything at t0 (an offline batch)."""

    kind: Literal["burst"]


class TraceArrival(_Model):
    """Requests replayed from a trace file: their send times and, in the public trace formats,
    their lengths (and, in Mooncake's, which prompts share which prefix)."""

    kind: Literal["trace"]
    file: str = Field(description="The trace: see format. Relative to the scenario's folder.")
    format: Literal["offsets", "mooncake", "burstgpt", "azure"] = Field(
        "offsets",
        description="offsets: one number of seconds a line, or JSONL with an 'offset' key. "
        "mooncake: JSONL of {timestamp (ms), input_length, output_length, hash_ids}. "
        "burstgpt: BurstGPT's CSV (Timestamp in s, Request tokens, Response tokens). "
        "azure: the Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens).",
    )
    time_scale: float = Field(
        1.0, gt=0, le=1e6, description="Multiply every offset (0.5 = twice as fast)."
    )
    rate: Rate | None = Field(
        None,
        description="Replay at this mean rate (requests per second) instead: the trace's times "
        "scaled so its requests span count/rate seconds.",
    )
    lengths: Literal["trace", "workload"] = Field(
        "trace",
        description="Where a request's input and output lengths come from, for the formats "
        "that carry them: the trace's row, or the workload's lengths.",
    )
    block_tokens: int = Field(
        512,
        ge=1,
        le=1_000_000,
        description="mooncake: the tokens each hash_id names (512 in Mooncake's traces).",
    )

    @model_validator(mode="after")
    def _one_speed(self):
        if self.rate is not None and self.time_scale != 1.0:
            raise ValueError("give time_scale or rate, not both")
        return self

    @property
    def carries_lengths(self) -> bool:
        """Whether each request's lengths come from the trace's rows."""
        return self.format != "offsets" and self.lengths == "trace"


class RampArrival(_Model):
    """Open loop: Poisson arrivals whose rate rises (or falls) linearly from ``from`` to ``to``
    over ``over``, then holds at ``to``."""

    kind: Literal["ramp"]
    from_: Rate = Field(alias="from", description="Requests per second at t0.")
    to: Rate = Field(description="Requests per second at the ramp's end, and after it.")
    over: PositiveDuration = Field(
        description="How long the rate takes to go from one to the other."
    )


class Step(_Model):
    """One step of a staircase: Poisson arrivals at ``rate`` for ``for``."""

    rate: Rate = Field(description="Requests per second in this step.")
    for_: PositiveDuration = Field(alias="for", description="How long the step lasts.")


class StepsArrival(_Model):
    """Open loop: Poisson arrivals at each step's rate in turn (a staircase), each step judged
    on its own."""

    kind: Literal["steps"]
    steps: list[Step] = Field(min_length=1, max_length=1000, description="The steps, in order.")

    @property
    def total_ns(self) -> int:
        return sum(step.for_ for step in self.steps)


Arrival = Annotated[
    ConstantArrival
    | PoissonArrival
    | GammaArrival
    | ConcurrencyArrival
    | BurstArrival
    | TraceArrival
    | RampArrival
    | StepsArrival,
    Field(discriminator="kind"),
]
