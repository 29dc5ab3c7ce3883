"""``metrics.json``: one run's document and its typed sections."""

from __future__ import annotations

from pydantic import (
    ConfigDict,
    Field,
)

from loadtest.core.json_types import JsonObject, JsonValue
from loadtest.results.model.backend_facts import (
    BackendFacts,
    MediaSent,
    StructuredChecks,
    ToolCallChecks,
)
from loadtest.results.model.base import (
    HEADLINE,
    RUN_SCHEMA,
    EncodedHistogram,
    LatencySummary,
    RunStatus,
    _Doc,
)
from loadtest.results.model.judged import Stability, Verdict
from loadtest.results.model.traffic import StepsResult, TrafficResult
from loadtest.telemetry.environment_section import Environment
from loadtest.telemetry.gpu_section import GpuSection
from loadtest.telemetry.profile_section import ProfileSection
from loadtest.telemetry.roofline_section import RooflineSection
from loadtest.telemetry.server_section import ServerSection


class Requests(_Doc):
    """How many requests were planned, sent, completed, failed (by type), and their tokens."""

    planned: int | None = None
    sent: int = 0
    never_sent: int | None = None
    completed: int = 0
    failed: int = 0
    warmup: int | None = None
    interrupted: int | None = None  # in flight when the run was stopped early
    cancelled: int | None = None  # cancelled mid-stream by the plan (load.cancel)
    # sends onto a kept-alive connection the server had already closed, sent again on a new
    # one (warm-up included): the client's, never a failure
    connection_retries: int | None = None
    errors_by_type: dict[str, int] = Field(default_factory=dict)
    under_two_tokens: int | None = None
    output_tokens: int | None = None
    input_tokens: int | None = None
    reasoning_tokens: int | None = None  # of output_tokens: a reasoning model's thinking
    profiled: int | None = None


class Window(_Doc):
    """The measured window, in seconds from t0 (the plan's origin)."""

    start_s: float | None
    end_s: float | None
    length_s: float | None
    run_s: float
    # t0 itself on the run's clock: CLOCK_MONOTONIC in a real run, the clock every process on the
    # host shares, so a server's own stamps there join with the requests' times from t0
    t0_clock_ns: int | None = None


class Throughput(_Doc):
    """Rates over the measured window (tokens or requests inside it / its length)."""

    requests_per_s: float | None
    output_tokens_per_s: float | None
    total_tokens_per_s: float | None
    output_tokens_in_window: int
    window_s: float | None
    input_tokens_per_s: float | None = None  # APIs with no token stream (embeddings, rerank)
    inputs_per_s: float | None = None  # texts embedded, or documents ranked, a second


class Harness(_Doc):
    """The client's own health: event-loop lag, requests the limiter held back, why it stopped."""

    loop_lag_ms: LatencySummary
    throttled_requests: int
    failure: str | None
    # a bug in loadtest that stopped the run (its exception; the run exits 5), never the server's
    internal_error: str | None = None
    # the event loop thread's CPU time over the run's real time (the busiest worker's); None
    # on a virtual clock, and in results written before it was measured
    loop_busy: float | None = None
    # how late a token's stamp may be for this client's own event loop (its lag p99): where
    # tokens are stamped when this client reads them (served models, the simulator); 0 where
    # the process that made them stamps them (the local engine). None: not recorded.
    stamp_delay_ms: float | None = None


class AnswerTally(_Doc):
    """Answers compared with their references, and how many matched."""

    compared: int
    matched: int


class AnswersResult(_Doc):
    """``answers:``: the answers under load compared with the same requests' answers alone
    (a reference pass before the window, one in flight, greedy). Counts and positions, never
    the texts."""

    compared_on: str  # text: the answers' text, character by character
    reference_requests: int  # sent alone before the window
    reference_s: float  # the reference pass's time
    reference_share: float | None  # of the reference pass and the window together
    compared: int
    matched: int
    match_rate: float | None
    match_interval: list[float] | None  # Wilson, two-sided at ``confidence``
    confidence: float
    unanswered: int  # compared requests that failed, or were cut, under load
    # where each diverged answer first parts from its reference, in characters
    first_divergence: dict[str, float] | None = None
    by_endpoint: dict[str, AnswerTally] | None = None
    by_model: dict[str, AnswerTally] | None = None


class ApiResult(_Doc):
    """What the API carried beyond a token stream: inputs a request (embeddings, rerank),
    reasoning, tool calls and structured answers checked, media sent."""

    name: str  # chat | completions | responses | embeddings | rerank (generate: an engine)
    # False: one JSON answer (embeddings, rerank, or stream: false), no TTFT/ITL/TPOT claimed
    streams_tokens: bool
    inputs_per_request: int | None = None  # texts embedded / documents ranked
    reasoning_tokens: int | None = None
    answer_tokens: int | None = None
    tool_calls: ToolCallChecks | None = None
    structured: StructuredChecks | None = None
    media: MediaSent | None = None


class WorkerClock(_Doc):
    """A worker on another host: its monotonic clock against the coordinator's, measured by
    round trips before t0 (it ran on the coordinator's timeline through this offset) and again
    after the run."""

    method: str  # udp | ray: whose round trips
    offset_ms: float  # its clock minus the coordinator's
    uncertainty_ms: float  # the true offset is within this of offset_ms (half the best trip)
    drift_ms: float | None = None  # the offset after the run minus before (None: not measured)
    drift_uncertainty_ms: float | None = None


class WorkerStats(_Doc):
    """One client worker's share of a run (a process here or a Ray actor): what it sent and
    how late."""

    index: int
    pid: int | None
    status: str  # ok | interrupted | failed | lost (died or fell silent: its measurements too)
    sent: int
    completed: int
    failed: int
    dispatch_lag_ms: LatencySummary
    loop_lag_ms: LatencySummary
    valid: bool  # kept up with its share of the schedule
    reasons: list[str] = Field(default_factory=list)
    failure: str | None = None
    host: str | None = None  # a Ray actor's node: host name, IP and node id
    ip: str | None = None
    node: str | None = None
    clock: WorkerClock | None = None  # None: on this host, one clock


class Validity(_Doc):
    """Whether the numbers can be trusted, why not, and what to be careful of."""

    valid: bool
    reasons: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    # every reason is the client's own lateness (dispatch, event-loop or stamp delay), which
    # each SLA and gate check takes off before it fails: its verdicts can still decide
    client_lateness_only: bool = False


class Cost(_Doc):
    """An estimate of what the measured throughput costs at the scenario's prices (``pricing``),
    with the prices it used (``price_*``). Hourly: the deployment's price over the window's
    rates. Per token: the measured requests' tokens at the API's prices."""

    basis: str  # "hourly" | "per_token"
    price_usd_per_hour: float | None = None  # hourly: the deployment's (gpus x per-GPU price)
    gpus: int | None = None
    price_usd_per_million_input_tokens: float | None = None  # per token: the API's prices
    price_usd_per_million_output_tokens: float | None = None
    usd_per_million_output_tokens: float | None = None  # the run's whole cost over its output
    usd_per_million_tokens: float | None = None  # over its input and output tokens
    usd_per_request: float | None = None  # a completed request
    usd_per_good_request: float | None = None  # a request that met the goodput objectives


class GoodputResult(_Doc):
    """How many finished requests met every per-request objective, and how many a second."""

    slo_ms: dict[str, float]  # the objectives set: ttft, tpot, e2e
    judged: int  # measured requests that finished (failures count, and are never good)
    good: int
    attainment: float | None  # good / judged
    good_requests_per_s: float | None  # good completions inside the window / window length


class TurnStats(_Doc):
    """One turn position of multi-turn sessions (1 = the first; the last row holds the rest)."""

    turn: str  # "1", "2", ... and "16+" for every turn from there on
    requests: int
    input_tokens_mean: float | None  # the whole prompt: history and the new message
    ttft_ms: LatencySummary


class SessionsResult(_Doc):
    """Multi-turn sessions: how many ran to their end, and TTFT by turn."""

    started: int
    completed: int  # every planned turn answered
    ended_by_failure: int  # a failed turn ends its session
    ended_by_cancel: int = 0  # a cancelled turn (load.cancel) ends its session
    cut_at_window_end: int  # a next turn fell after the window's end, so was not sent
    turns_sent: int
    history: str  # what earlier replies in a turn's history are: the server's, or stand-ins
    stand_in_replies: int
    ttft_first_turn_ms: LatencySummary
    ttft_later_turns_ms: LatencySummary
    per_turn: list[TurnStats]


class IntervalPoint(_Doc):
    """One reporting interval: counts, p50/p99 of the interval metrics, encoded histograms."""

    model_config = ConfigDict(
        extra="allow", populate_by_name=True
    )  # <metric>_p50_ms / _p99_ms per interval metric

    index: int
    t_s: float
    completed: int
    failed: int
    output_tokens_per_s: float
    histograms: dict[str, EncodedHistogram] = Field(default_factory=dict)

    def figure(self, name: str) -> float | None:
        """A field or one of the interval's ``<metric>_p50_ms`` / ``_p99_ms`` figures."""
        value = (
            getattr(self, name)
            if name in type(self).model_fields
            else (self.model_extra or {}).get(name)
        )
        return None if value is None else float(value)


class Timeseries(_Doc):
    """The run in reporting intervals (for plots and the regression bootstrap)."""

    interval_s: float
    points: list[IntervalPoint]


_DEPRECATED: dict[str, JsonValue] = {"deprecated": True}  # said in the schema; no warning on read


class RunMetrics(_Doc):
    """``metrics.json``: one run, whatever its status. A run that never started has only the
    identity, the environment, ``requests`` and ``validity`` (with the reason); the measured
    sections are null."""

    schema_: str = Field(RUN_SCHEMA, alias="schema")
    status: RunStatus
    interrupted_by: str | None = None
    name: str
    started_at: str
    scenario_file: str
    scenario: JsonObject
    environment: Environment
    backend: BackendFacts
    requests: Requests
    window: Window | None = None
    latency_ms: dict[str, LatencySummary] | None = None
    throughput: Throughput | None = None
    harness: Harness | None = None
    validity: Validity
    stability: Stability | None = None
    goodput: GoodputResult | None = None
    cost: Cost | None = None  # where the scenario sets pricing
    sessions: SessionsResult | None = None
    api: ApiResult | None = None  # set where the API is not plain streamed chat or completions
    answers: AnswersResult | None = None  # answers: compared with the references
    steps: StepsResult | None = None  # arrival: {kind: steps}
    traffic: TrafficResult | None = None
    workers: list[WorkerStats] | None = None  # load.workers > 1: each client process
    timeseries: Timeseries | None = None
    histograms: dict[str, EncodedHistogram] | None = None
    histograms_over_range: dict[str, int] | None = None
    loop_lag_histogram: EncodedHistogram | None = None
    definitions: dict[str, str] | None = None
    # Flat headline keys for scripts, named for what they are.
    output_tokens_per_s: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    e2e_p99_ms: float | None = None
    # the same end-to-end figures under their old names, read as TTFT by many: kept this
    # release, deprecated in the schema
    p50_ms: float | None = Field(
        None, description="Deprecated: e2e_p50_ms.", json_schema_extra=_DEPRECATED
    )
    p95_ms: float | None = Field(
        None, description="Deprecated: e2e_p95_ms.", json_schema_extra=_DEPRECATED
    )
    p99_ms: float | None = Field(
        None, description="Deprecated: e2e_p99_ms.", json_schema_extra=_DEPRECATED
    )
    peak_mem_mb: float | None = None
    commit: str | None = None
    gpu: GpuSection | None = None
    server: ServerSection | None = None  # the server's own /metrics, where it has them
    profile: ProfileSection | None = None
    roofline: RooflineSection | None = None
    sla: Verdict | None = None

    @property
    def measured(self) -> bool:
        """Whether the run measured anything (a run that failed to start did not)."""
        return self.histograms is not None

    def headline(self, name: str) -> float | None:
        """One of ``HEADLINE``'s metrics, or None where the run has no such figure."""
        section, key, *pct = HEADLINE[name]
        part = getattr(self, section)
        if part is None:
            return None
        if pct:
            summary = part.get(key)
            value = None if summary is None else getattr(summary, pct[0])
        else:
            value = getattr(part, key)
        return None if value is None else float(value)
