"""The raw result of a run -> ``metrics.json`` (the source of truth every report reads).

One place builds it: the recorder's figures, the validity and stability verdicts
(``validity``), and what was seen around the requests with the SLA verdict (``finish``); the
document leaves ``build_result`` complete.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from loadtest.backends.base import Facts
from loadtest.config.apis import POOLING_APIS, api_of
from loadtest.config.scenario import Scenario
from loadtest.core.histogram import LatencyHistogram
from loadtest.core.json_types import JsonValue
from loadtest.execution.recorder import ALL_METRICS, TURN_BUCKETS, ModelTally, Recorder
from loadtest.execution.runner import RunOutcome
from loadtest.results import cost
from loadtest.results.answers import answers_result
from loadtest.results.finish import Observed, finish
from loadtest.results.model import (
    ApiResult,
    BackendFacts,
    CancelResult,
    GoodputResult,
    Harness,
    IntervalPoint,
    LatencySummary,
    ModelResult,
    OutputChecks,
    Requests,
    RunMetrics,
    SessionsResult,
    StepsResult,
    Throughput,
    Timeseries,
    TraceResult,
    TrafficResult,
    TurnStats,
    Validity,
    Verdict,
    Window,
)
from loadtest.results.steps import judge_steps
from loadtest.results.validity import judge_run, stamp_delay_ms, window_seconds
from loadtest.telemetry.environment_section import Environment

DEFINITIONS = {
    "ttft": "time to first token: first token on the host - intended send time",
    "ttft_service": "first token - actual send time (hides client lag; kept for comparison)",
    "ttft_answer": "a reasoning model's first answer token (not reasoning) - intended send time",
    "itl": "inter-token latency: every gap between consecutive tokens, pooled over requests",
    "tpot": "time per output token: (last token - first token) / (tokens - 1), per request with >= 2 tokens",
    "e2e": "end to end: last token - intended send time",
    "e2e_service": "last token - actual send time",
    "queue": "admitted into a running batch - intended send time",
    "dispatch_lag": "actual send - intended send time (or, where a cap or ceiling held it, the "
    "moment it let go): the harness's own lateness",
    "slot_wait": "a free in-flight slot (load.max_in_flight) - intended send time: the cap's "
    "wait, inside TTFT and E2E, never the harness's lateness",
    "output_tokens_per_s": "output tokens stamped inside the measured window / window length",
    "total_tokens_per_s": "(input tokens of requests whose first token fell in the window + output tokens in it) / window",
    "requests_per_s": "requests completed inside the measured window / window length",
    "input_tokens": "a prompt's tokens: the server's count where it reports one, else the client's",
}


def build_result(
    *,
    scenario: Scenario,
    scenario_path: str,
    outcome: RunOutcome | None,
    backend: Facts,
    environment: Environment,
    planned: int | None,
    started_at: str,
    interrupted_by: str | None = None,
    start_failure: str | None = None,
    seen: Observed | None = None,
    judge: Callable[[RunMetrics], Verdict | None] | None = None,
) -> RunMetrics:
    """The result of one run, whatever its status, complete: what was ``seen`` around the
    requests is added and ``judge`` gives the SLA verdict (``finish``). ``outcome`` is None for
    a run that never started (``start_failure`` says why): nothing was measured, and the result
    says so."""
    backend = dict(backend)
    planned_traffic = backend.pop("traffic", None)  # the plan's, not the backend's
    facts = BackendFacts.model_validate(backend)
    identity = dict(
        name=scenario.name,
        started_at=started_at,
        scenario_file=scenario_path,
        scenario=scenario.public_dump(),
        environment=environment,
        backend=facts,
        interrupted_by=interrupted_by,
        commit=environment.commit,
    )
    if outcome is None:
        reason = start_failure or "the run did not start"
        return RunMetrics(
            status="interrupted" if interrupted_by else "failed",
            requests=Requests(planned=planned, sent=0, never_sent=planned, completed=0, failed=0),
            validity=Validity(valid=False, reasons=[reason]),
            **identity,
        )
    rec = outcome.recorder
    hists = rec.histograms()
    validity, workers, stability = judge_run(scenario, outcome, hists, facts.warnings)
    status = outcome.status if outcome.status != "ok" else ("ok" if validity.valid else "invalid")
    window_s = window_seconds(rec)
    api = _api(scenario, rec, facts)
    throughput = _throughput(rec, window_s, api)
    # a reasoning model's time to its answer: only where some stream carried reasoning
    # and the wait for an in-flight slot where the load caps what is in flight
    shown = [
        m
        for m in ALL_METRICS
        if (m != "ttft_answer" or rec.reasoning_tokens_measured)
        and (m != "slot_wait" or scenario.load.max_in_flight is not None)
    ]
    latency = {m: LatencySummary(**hists[m].summary_ms()) for m in shown}
    e2e = latency["e2e"]
    goodput, requests = _goodput(scenario, rec, window_s), _requests(outcome, planned)
    result = RunMetrics(
        status=status,
        requests=requests,
        window=_window(outcome, window_s),
        latency_ms=latency,
        throughput=throughput,
        harness=_harness(outcome, stamp_delay_ms(scenario, outcome.loop_lag)),
        validity=validity,
        stability=stability,
        goodput=goodput,
        cost=cost.estimate(scenario.pricing, throughput, requests, goodput),
        sessions=_sessions(outcome),
        api=api,
        answers=answers_result(scenario, rec.answers, window_s),
        steps=_steps(scenario, outcome),
        traffic=_traffic(scenario, rec, planned_traffic, window_s),
        workers=workers,
        timeseries=Timeseries(interval_s=rec.interval_ns / 1e9, points=_points(rec)),
        histograms={m: hists[m].encode() for m in shown},
        histograms_over_range={m: hists[m].over_range for m in shown},
        loop_lag_histogram=outcome.loop_lag.encode(),
        definitions=DEFINITIONS,
        output_tokens_per_s=throughput.output_tokens_per_s,
        ttft_p50_ms=latency["ttft"].p50,
        ttft_p99_ms=latency["ttft"].p99,
        itl_p50_ms=latency["itl"].p50,
        itl_p99_ms=latency["itl"].p99,
        e2e_p50_ms=e2e.p50,
        e2e_p95_ms=e2e.p95,
        e2e_p99_ms=e2e.p99,
        p50_ms=e2e.p50,
        p95_ms=e2e.p95,
        p99_ms=e2e.p99,
        peak_mem_mb=facts.peak_mem_mb,
        **identity,
    )
    return finish(result, scenario, outcome, seen or Observed(environment), judge)


def _throughput(rec: Recorder, window_s: float | None, api: ApiResult | None) -> Throughput:
    """Rates over the measured window; a pooling API's (embeddings, rerank) in inputs too."""
    pooled = api is not None and api.inputs_per_request is not None
    requests_per_s = _rate(rec.window.completions, window_s)
    return Throughput(
        requests_per_s=requests_per_s,
        output_tokens_per_s=_rate(rec.window.tokens, window_s),
        total_tokens_per_s=_rate(rec.window.tokens + rec.window.input_tokens, window_s),
        output_tokens_in_window=rec.window.tokens,
        window_s=window_s,
        input_tokens_per_s=_rate(rec.window.input_tokens, window_s) if pooled else None,
        inputs_per_s=None
        if not pooled or requests_per_s is None or api is None
        else requests_per_s * (api.inputs_per_request or 1),
    )


def _harness(outcome: RunOutcome, stamp_delay: float) -> Harness:
    """How the harness itself did: its loop's lag, what held it back, how it failed."""
    return Harness(
        stamp_delay_ms=stamp_delay,
        loop_lag_ms=LatencySummary(**outcome.loop_lag.summary_ms()),
        throttled_requests=outcome.throttled,
        failure=outcome.failure,
        internal_error=outcome.internal_error,
        loop_busy=outcome.loop_busy,
    )


def _requests(outcome: RunOutcome, planned: int | None) -> Requests:
    rec = outcome.recorder
    return Requests(
        planned=planned,
        sent=outcome.sent,
        never_sent=None if planned is None else max(0, planned - outcome.sent),
        completed=rec.completed,
        failed=rec.failed,
        warmup=rec.warmup,
        interrupted=outcome.interrupted,
        cancelled=rec.cancelled or None,
        connection_retries=rec.connection_retries or None,
        errors_by_type=dict(rec.errors_by_type),
        under_two_tokens=rec.single_token,
        output_tokens=rec.output_tokens_measured,
        input_tokens=rec.input_tokens_measured,
        reasoning_tokens=rec.reasoning_tokens_measured or None,
    )


def _steps(scenario: Scenario, outcome: RunOutcome) -> StepsResult | None:
    """A staircase's steps judged one by one (``results.steps``)."""
    arrival = scenario.load.arrival
    if arrival.kind != "steps":
        return None
    rec = outcome.recorder
    steps = [(step.rate, step.for_) for step in arrival.steps]
    return judge_steps(steps, rec.timeline, outcome.t0_ns, rec.interval_ns)


class PlannedTraffic(BaseModel):
    """What the plan said of its traffic (``Plan.describe``), as the backend's facts carry it."""

    text: str | None = None
    trace: TraceResult | None = None
    planned_cancel: int | None = None
    planned_models: dict[str, int] = {}


def _traffic(
    scenario: Scenario, rec: Recorder, described: JsonValue, window_s: float | None
) -> TrafficResult | None:
    """The traffic's own section: where it is more than synthetic text at a rate (a trace,
    cancellations, a model mix), or its text is not the default."""
    planned = PlannedTraffic.model_validate(described or {})
    text = planned.text or scenario.workload.text
    cancel = scenario.load.cancel
    trace = planned.trace
    if (
        text == "natural"
        and trace is None
        and cancel is None
        and not rec.by_model
        and not rec.by_endpoint
    ):
        return None
    cancel_result = None
    if cancel is not None:
        ttft = rec.whole["cancelled_ttft"]
        cancel_result = CancelResult(
            fraction=cancel.fraction,
            after_s=None if cancel.after is None else cancel.after / 1e9,
            after_tokens=cancel.after_tokens,
            planned=planned.planned_cancel,
            cancelled=rec.cancelled,
            tokens_received=rec.cancelled_tokens,
            ttft_ms=LatencySummary(**ttft.summary_ms()) if ttft.count else None,
            cancelled_at_ms=LatencySummary(**rec.whole["cancelled_at"].summary_ms()),
            delivered_tokens=sum(rec.window.token_bins.values()),
        )
    models = _shares(rec.by_model, window_s, planned.planned_models)
    return TrafficResult(
        text=text,
        trace=trace,
        cancel=cancel_result,
        models=models,
        endpoints=_shares(rec.by_endpoint, window_s, {}),
    )


def _shares(
    tallies: dict[str, ModelTally], window_s: float | None, planned: dict[str, int]
) -> dict[str, ModelResult] | None:
    """Each share of the traffic (a model of a mix, an endpoint of several): its requests,
    latencies and throughput; None where the traffic has no such shares."""
    if not tallies:
        return None
    return {
        name: ModelResult(
            planned=planned.get(name),
            completed=t.completed,
            failed=t.failed,
            cancelled=t.cancelled,
            requests_per_s=_rate(t.window_completions, window_s),
            output_tokens_per_s=_rate(t.window_tokens, window_s),
            latency_ms={m: LatencySummary(**h.summary_ms()) for m, h in t.histograms.items()},
            histograms={m: h.encode() for m, h in t.histograms.items()},
        )
        for name, t in sorted(tallies.items())
    }


def _api(scenario: Scenario, rec: Recorder, facts: BackendFacts) -> ApiResult | None:
    """The API's own section: set for every API but plain chat and completions with nothing
    checked (their figures are the token stream's, already in the result)."""
    name = api_of(scenario.backend)
    checks = facts.checks or OutputChecks()
    w = scenario.workload
    reasoning = rec.reasoning_tokens_measured
    streamed = getattr(scenario.backend, "stream", True)  # False: one JSON answer a request
    checked = checks.tool_calls or checks.structured or checks.media
    plain = name in ("chat", "completions", "generate") and not checked and not reasoning
    if plain and streamed:
        return None
    pooled = name in POOLING_APIS
    inputs = (w.inputs_per_request or 1) if name == "embeddings" else (w.documents or 1)
    return ApiResult(
        name=name,
        streams_tokens=not pooled and streamed,
        inputs_per_request=inputs if pooled else None,
        reasoning_tokens=reasoning if reasoning else None,
        answer_tokens=rec.output_tokens_measured - reasoning if reasoning else None,
        tool_calls=checks.tool_calls,
        structured=checks.structured,
        media=checks.media,
    )


def _window(outcome: RunOutcome, window_s: float | None) -> Window:
    rec, t0 = outcome.recorder, outcome.t0_ns
    return Window(
        start_s=None if rec.window.start is None else (rec.window.start - t0) / 1e9,
        end_s=None if rec.window.end is None else (rec.window.end - t0) / 1e9,
        length_s=window_s,
        run_s=(outcome.end_ns - t0) / 1e9,
        t0_clock_ns=t0,
    )


def _sessions(outcome: RunOutcome) -> SessionsResult | None:
    counts, rec = outcome.sessions, outcome.recorder
    if counts is None:
        return None
    first, later = LatencyHistogram(), LatencyHistogram()
    per_turn = []
    for turn in sorted(rec.turn_ttft):
        h = rec.turn_ttft[turn]
        (first if turn == 0 else later).add(h)
        n = rec.turn_requests[turn]
        per_turn.append(
            TurnStats(
                turn=f"{turn + 1}+" if turn == TURN_BUCKETS - 1 else str(turn + 1),
                requests=n,
                input_tokens_mean=rec.turn_input_tokens[turn] / n if n else None,
                ttft_ms=LatencySummary(**h.summary_ms()),
            )
        )
    return SessionsResult(
        started=counts.started,
        completed=counts.completed,
        ended_by_failure=counts.ended_by_failure,
        ended_by_cancel=counts.ended_by_cancel,
        cut_at_window_end=counts.cut_at_window_end,
        turns_sent=counts.turns_sent,
        history=(
            "stand-in replies of the same token count (the backend returns no text)"
            if counts.stand_in_replies
            else "the server's replies"
        ),
        stand_in_replies=counts.stand_in_replies,
        ttft_first_turn_ms=LatencySummary(**first.summary_ms()),
        ttft_later_turns_ms=LatencySummary(**later.summary_ms()),
        per_turn=per_turn,
    )


def _goodput(scenario: Scenario, rec: Recorder, window_s: float | None) -> GoodputResult | None:
    g = scenario.goodput
    if g is None:
        return None
    tl = rec.timeline
    judged = good = good_in_window = 0
    for is_good, measured, done in zip(tl.good, tl.measured, tl.done):
        if not measured or is_good < 0:
            continue
        judged += 1
        if is_good:
            good += 1
            if rec.window.start is not None and rec.window.end is not None:
                good_in_window += rec.window.start <= done < rec.window.end
    return GoodputResult(
        slo_ms={k: v / 1e6 for k, v in (("ttft", g.ttft), ("tpot", g.tpot), ("e2e", g.e2e)) if v},
        judged=judged,
        good=good,
        attainment=good / judged if judged else None,
        good_requests_per_s=_rate(good_in_window, window_s),
    )


def _rate(n: int, seconds: float | None) -> float | None:
    return None if not seconds else n / seconds


def _points(rec: Recorder) -> list[IntervalPoint]:
    width = rec.interval_ns / 1e9
    by_index = {c["index"]: c for c in rec.closed}
    indices = sorted(set(by_index) | set(rec.window.token_bins))
    points = []
    for k in indices:
        c = by_index.get(k, {"index": k, "completed": 0, "failed": 0, "histograms": {}})
        points.append(
            IntervalPoint(
                **c, t_s=k * width, output_tokens_per_s=rec.window.token_bins.get(k, 0) / width
            )
        )
    return points
