"""What the traffic was and how each part of it fared: a staircase's steps and knee,
cancellations, a model mix's or several endpoints' shares, a replayed trace."""

from __future__ import annotations

from loadtest.results.model.base import EncodedHistogram, LatencySummary, _Doc
from loadtest.results.model.judged import Stability
from loadtest.telemetry.server_section import ServerMetrics


class StepResult(_Doc):
    """One step of a staircase (``arrival: {kind: steps}``), judged on its own span: its
    requests (by intended send time), their TTFT and E2E, and whether the step was carried."""

    index: int  # 1 = the first step
    rate: float  # offered, as planned (req/s)
    start_s: float  # from t0
    end_s: float
    requests: int  # measured requests intended inside the step
    delivered_rps: float | None
    ttft_ms: LatencySummary
    e2e_ms: LatencySummary
    stability: Stability | None


class Knee(_Doc):
    """Where the staircase stopped being carried: the last steady step's rate and the first
    unsteady one's (capacity lies between them), with why."""

    last_steady_rate: float | None  # None: the first step was already not carried
    first_unsteady_rate: float
    step: int  # the first unsteady step (1-based)
    reasons: list[str]


class StepsResult(_Doc):
    """A staircase's steps, each with its own percentiles and verdict, and its knee (None
    when every step was carried)."""

    steps: list[StepResult]
    knee: Knee | None = None


class CancelResult(_Doc):
    """Requests the plan cancelled mid-stream (``load.cancel``), apart from the others."""

    fraction: float  # the share asked for
    after_s: float | None = None
    after_tokens: int | None = None
    planned: int | None = None  # measured requests the plan marked (open loop)
    cancelled: int  # measured requests cancelled mid-stream (the rest finished first)
    tokens_received: int  # output tokens they had received
    ttft_ms: LatencySummary | None = None  # of those that had a first token
    cancelled_at_ms: LatencySummary  # when they were cancelled, from their intended send
    # every output token the client received in the run (warm-up too): beside the server's
    # own count of tokens generated, what it generated that nobody read
    delivered_tokens: int


class ModelResult(_Doc):
    """One share of the traffic (a model of a model mix, an endpoint of several): its
    requests, latencies and throughput."""

    planned: int | None = None  # measured requests the plan sent to it (open loop)
    completed: int
    failed: int
    cancelled: int = 0
    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None
    latency_ms: dict[str, LatencySummary]
    histograms: dict[str, EncodedHistogram]  # as the run's: SLA checks are judged on them
    # the server's own metrics of this model, where its series name their model (server.by_model)
    server: ServerMetrics | None = None


class TraceResult(_Doc):
    """A replayed trace: its format, and how much of its prompts it sends twice."""

    format: str
    requests: int  # the plan's (warm-up included)
    lengths: str  # where lengths came from: the trace or the workload
    # mooncake: the share of measured prompt tokens an earlier request sent as the same
    # prefix (what a cache with room for everything would hit); None without hash ids
    prefix_reuse: float | None = None


class TrafficResult(_Doc):
    """What the traffic was, beyond arrivals and lengths: its text, a replayed trace,
    cancellations, a model mix."""

    text: str  # synthetic prompts' text: natural or random
    trace: TraceResult | None = None
    cancel: CancelResult | None = None
    models: dict[str, ModelResult] | None = None
    # several endpoints of one model (backend.endpoints): each one's share, by its URL
    endpoints: dict[str, ModelResult] | None = None
