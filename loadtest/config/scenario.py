"""The scenario: a strict, frozen, declarative description of one load test.

Every model forbids unknown keys and documents each field. Validators are pure: they never touch
the GPU, the network or any file (files a scenario names are checked by ``scenario_file``).
"""

from __future__ import annotations

import importlib.util

from pydantic import Field, model_validator

from loadtest.config.answers import Answers, answers_problems
from loadtest.config.apis import api_of, api_problems
from loadtest.config.arrivals import MAX_USERS, Arrival
from loadtest.config.backend_specs import BackendSpec, SimSpec
from loadtest.config.objectives import Goodput, Pricing, Sla
from loadtest.config.observing import Outputs, Profile, Telemetry
from loadtest.config.spec import Problem
from loadtest.config.traffic import Cancel, traffic_problems
from loadtest.config.types import Duration, PositiveDuration, Rate, StrictModel, as_written
from loadtest.config.workload import Workload

# Upper bound that stops a typo (rate: 1e9) from exhausting memory before anything runs.
DEFAULT_MAX_PLANNED = 1_000_000


_Model = StrictModel

# --- sections ---------------------------------------------------------------------------------


class Seeds(_Model):
    """One seed per random dimension: the schedule, the prompts, the lengths."""

    schedule: int = Field(0, ge=0, description="Arrival times (and think times).")
    prompts: int = Field(0, ge=0, description="Prompt text and dataset order.")
    lengths: int = Field(0, ge=0, description="Input and output token lengths.")


class Validity(_Model):
    """When a run is marked invalid because the client, not the server, was the bottleneck."""

    max_dispatch_lag_p99: Duration = Field(
        as_written("5ms"), description="Over this, the client was the bottleneck: run invalid."
    )
    max_loop_lag_p99: Duration = Field(
        as_written("20ms"), description="Event-loop lag p99 over this: run invalid."
    )
    max_stamp_delay_share: float = Field(
        1.0,
        gt=0,
        description="A token is stamped when the event loop takes the read that brought it, "
        "so stamps wait by up to the loop's lag. Event-loop lag p99 over this share of the "
        "typical gap between tokens (TPOT p50), and over 1 ms: the client's delay is as large "
        "as what it measures (ITL, TPOT), run invalid. Over a quarter of it: a warning.",
    )
    max_burst_send_share: float = Field(
        0.01,
        gt=0,
        le=1,
        description="A burst (every request due at t0) is sent one request after another, so "
        "its per-request lag grows with its size whatever the client: a burst late by "
        "max_dispatch_lag_p99 is judged instead by its last send's lateness as a share of the "
        "measured window, the span its throughput divides by. Over this share, the client set "
        "the throughput: run invalid.",
    )
    min_completed: int = Field(
        1, ge=0, description="Fewer completed measured requests: run invalid."
    )


class Load(_Model):
    """How hard and how long: the arrival process, the window, warm-up, drain and deadlines."""

    arrival: Arrival = Field(description="How requests arrive.")
    duration: PositiveDuration | None = Field(
        None, description="Measured window length (give this or requests)."
    )
    requests: int | None = Field(
        None, ge=1, description="Measured request count (give this or duration)."
    )
    warmup: Duration | None = Field(
        None, description="Warmup by time before the window; excluded from statistics."
    )
    warmup_requests: int | None = Field(
        None, ge=0, description="Warmup by count before the window."
    )
    drain_timeout: Duration = Field(
        as_written("60s"), description="After the window, how long in-flight requests may finish."
    )
    stall_timeout: PositiveDuration = Field(
        as_written("60s"),
        description="With requests in flight and no event from the system under test for this "
        "long, it has stopped answering: the run ends (status failed) with what it measured.",
    )
    max_planned_requests: int = Field(
        DEFAULT_MAX_PLANNED,
        ge=1,
        description="Refuse a scenario that would plan more requests than this (warmup "
        "included): a typo such as rate: 1e9 fails at once instead of exhausting memory.",
    )
    request_timeout: PositiveDuration | None = Field(
        None, description="A request still running after this fails with Timeout."
    )
    max_rate: Rate | None = Field(
        None, description="Ceiling on sends per second over any arrival process (a limiter)."
    )
    max_in_flight: int | None = Field(
        None,
        ge=1,
        le=MAX_USERS,
        description="Open loop: at most this many requests in flight (vLLM's --max-concurrency, "
        "AIPerf's --concurrency with a rate). A request due while all are taken waits for one "
        "to finish: that wait is in its TTFT and E2E (they count from the plan) and is its own "
        "figure (slot_wait), never the client's lateness. A session holds one from its first "
        "turn to its last.",
    )
    validity: Validity = Field(
        default_factory=Validity, description="When the run is marked invalid."
    )
    workers: int = Field(
        1,
        ge=1,
        description="Client processes on this host sharing the plan (open loop: the arrivals; "
        "closed loop: the users), each with its own connections, from one t0: more load than "
        "one process can offer (--workers).",
    )
    cancel: Cancel | None = Field(
        None,
        description="Cancel a seeded share of requests mid-stream, as users abandon chats: "
        "{fraction, after: duration from the intended send} or {fraction, after_tokens: N}.",
    )
    ray: str | None = Field(
        None,
        min_length=1,
        description="Run the workers as actors on this Ray cluster (an address: auto, "
        "host:6379, ray://host:10001; or local: start Ray on this host), spread over its nodes, "
        "with each node's clock offset measured (--ray; needs llm-loadtest[distributed]).",
    )

    @model_validator(mode="after")
    def _window(self):
        # a trace and a staircase end by themselves: their window may end with their last request
        ends = self.arrival.kind in ("trace", "steps")
        if (self.duration is None) == (self.requests is None) and not ends:
            raise ValueError("give exactly one of duration or requests")
        if self.duration is not None and self.requests is not None:
            raise ValueError("give exactly one of duration or requests")
        if self.warmup is not None and self.warmup_requests is not None:
            raise ValueError("give at most one of warmup or warmup_requests")
        if self.arrival.kind == "burst" and (self.duration is not None or self.warmup is not None):
            raise ValueError(
                "a burst sends everything at t0: give requests (and warmup_requests), not durations"
            )
        if self.max_in_flight is not None and self.arrival.kind == "concurrency":
            raise ValueError(
                "max_in_flight caps an open loop; a closed loop's users already are its cap "
                "(give arrival.users)"
            )
        if self.max_in_flight is not None and self.max_in_flight < self.workers:
            raise ValueError(
                f"max_in_flight {self.max_in_flight} is shared by {self.workers} workers: each "
                "needs at least one (fewer workers, or a higher cap)"
            )
        planned = self.planned_estimate()
        if planned is not None and planned > self.max_planned_requests:
            raise ValueError(
                f"this load plans about {planned:,.0f} requests, over the limit of "
                f"{self.max_planned_requests:,} (raise load.max_planned_requests if you mean it)"
            )
        return self

    def planned_estimate(self) -> float | None:
        """About how many requests the plan holds (warmup included), before building it."""
        arrival = self.arrival
        count: float = (self.requests or 0) + (self.warmup_requests or 0)
        rate = getattr(arrival, "rate", None)
        if arrival.kind == "ramp":
            rate = max(arrival.from_, arrival.to)
        if arrival.kind == "steps":
            count += sum(step.rate * step.for_ for step in arrival.steps) / 1e9
        elif rate is not None and (self.duration is not None or self.warmup is not None):
            count += rate * ((self.duration or 0) + (self.warmup or 0)) / 1e9
        if arrival.kind == "concurrency":
            count = max(count, arrival.users)
        return count or None


class Scenario(_Model):
    """One load test: what to drive, with what, how hard, and what counts as good."""

    name: str = Field(
        min_length=1,
        max_length=200,
        description="Names the run; its default directory is this name made safe for a file system.",
    )
    seeds: Seeds = Field(default_factory=Seeds, description="One seed per random dimension.")
    backend: BackendSpec = Field(
        default_factory=SimSpec, description="The system under test, by kind."
    )
    workload: Workload = Field(default_factory=Workload, description="Prompts and lengths.")
    load: Load = Field(description="Arrivals, window, warmup, drain.")
    sla: Sla | None = Field(None, description="Objectives that decide the exit code.")
    goodput: Goodput | None = Field(
        None, description="Per-request objectives: goodput req/s and attainment in the result."
    )
    pricing: Pricing | None = Field(
        None,
        description="What the deployment costs: the result estimates the cost per million "
        "tokens and per request at the measured throughput.",
    )
    outputs: Outputs = Field(default_factory=Outputs, description="What to write, and where.")
    telemetry: Telemetry = Field(
        default_factory=Telemetry, description="GPU sampling beside the latencies."
    )
    profile: Profile | None = Field(
        None, description="A torch.profiler capture window (transformers backend)."
    )
    answers: Answers | None = Field(
        None,
        description="Each answer under load checked against the same request's answer alone "
        "(a reference pass before the window, one in flight, greedy): its match rate.",
    )

    @model_validator(mode="after")
    def _greedy_for_answers(self):
        # answers compare greedy answers: a served model's requests say so, and the saved
        # scenario shows it
        body = getattr(self.backend, "extra_body", None)
        if self.answers is not None and body is not None and "temperature" not in body:
            body["temperature"] = 0
        return self

    def combination_problems(self) -> list[Problem]:
        """Fields valid alone that do not go together: ``[(field_path, message)]``."""
        problems: list[Problem] = []
        n = self.load.workers
        if n > 1 or self.load.ray is not None:
            where = ("load", "workers") if self.load.ray is None else ("load", "ray")
            refused = self.backend.workers_refused
            if refused:
                problems.append(
                    (
                        where,
                        f"client workers ({n}) cannot share backend kind {self.backend.kind}: "
                        f"{refused}. Use one process (workers: 1, no ray), or serve the model "
                        "and drive it with kind: openai",
                    )
                )
            users = getattr(self.load.arrival, "users", None)
            if users is not None and users < n:
                problems.append(
                    (where, f"{n} workers for {users} users: each worker needs one at least")
                )
            if self.profile is not None:
                problems.append((where, "a profiler window needs one process (workers: 1, no ray)"))
            if self.load.ray is not None and importlib.util.find_spec("ray") is None:
                problems.append(
                    (where, "Ray is not installed: pip install 'llm-loadtest[distributed]'")
                )
        load = self.load
        one_process = load.workers == 1 and load.ray is None
        problems += answers_problems(
            self.answers, self.backend, self.workload, one_process, load.cancel is not None
        )
        problems += traffic_problems(
            self.backend, self.workload, self.load.arrival, self.load.cancel
        )
        streamed = getattr(self.backend, "stream", True)
        bounded = [(n, m) for n, m, _, _ in self.sla.latency_bounds()] if self.sla else []
        goodput = self.goodput
        on_stream = goodput is not None and (goodput.ttft, goodput.tpot) != (None, None)
        return problems + api_problems(
            api_of(self.backend), self.workload, bounded, on_stream, streamed
        )

    def public_dump(self) -> dict:
        """The scenario as saved in a result: secrets (URL credentials, sensitive headers and
        body fields) masked, by name, whatever their values."""
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        data["backend"] = self.backend.redact(data["backend"])
        if data.get("telemetry", {}).get("dcgm"):
            from loadtest.core import secrets

            data["telemetry"]["dcgm"] = secrets.redact_url(data["telemetry"]["dcgm"])
        return data
