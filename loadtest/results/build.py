"""The raw result of a run -> ``metrics.json`` (the source of truth every report reads).

Validity is judged here from the numbers, separately from pass/fail: a run whose client fell
behind is invalid whatever its latencies say (they still include the delay).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from loadtest.config.scenario import Scenario
from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.recorder import ALL_METRICS, TURN_BUCKETS, Recorder
from loadtest.execution.runner import RunOutcome
from loadtest.results.finish import Observed, finish
from loadtest.results.model import (
    GoodputResult,
    Harness,
    IntervalPoint,
    LatencySummary,
    Requests,
    RunMetrics,
    SessionsResult,
    Stability,
    Throughput,
    Timeseries,
    TurnStats,
    Validity,
    Verdict,
    Window,
    WorkerClock,
    WorkerStats,
)
from loadtest.results.stability import judge as judge_stability

DEFINITIONS = {
    "ttft": "time to first token: first token on the host - intended send time",
    "ttft_service": "first token - actual send time (hides client lag; kept for comparison)",
    "itl": "inter-token latency: every gap between consecutive tokens, pooled over requests",
    "tpot": "time per output token: (last token - first token) / (tokens - 1), per request with >= 2 tokens",
    "e2e": "end to end: last token - intended send time",
    "e2e_service": "last token - actual send time",
    "queue": "admitted into a running batch - intended send time",
    "dispatch_lag": "actual send - intended send time: the harness's own lateness",
    "output_tokens_per_s": "output tokens stamped inside the measured window / window length",
    "total_tokens_per_s": "(input tokens of requests whose first token fell in the window + output tokens in it) / window",
    "requests_per_s": "requests completed inside the measured window / window length",
    "input_tokens": "a prompt's tokens: the server's count where it reports one, else the client's",
}


def judge_validity(
    scenario: Scenario,
    outcome: RunOutcome,
    hists: dict[str, LatencyHistogram],
    backend_warnings: Sequence[str] = (),
) -> Validity:
    """Invalid when the client was the bottleneck (dispatch or loop lag) or too little completed; warnings for the rest."""
    v = scenario.load.validity
    reasons, warnings = [], list(backend_warnings)
    rec = outcome.recorder
    for reason, warning in (
        _judge_dispatch(scenario, hists["dispatch_lag"], _window_s(rec), rec.late_sends),
        _judge_lag("event-loop lag", outcome.loop_lag, v.max_loop_lag_p99),
    ):
        if reason:
            reasons.append(reason)
        if warning:
            warnings.append(warning)
    if rec.completed < v.min_completed:
        reasons.append(f"{rec.completed} measured requests completed, fewer than {v.min_completed}")
    if rec.failed:
        top = ", ".join(f"{k} {n}" for k, n in rec.errors_by_type.most_common(3))
        warnings.append(
            f"{rec.failed} of {rec.completed + rec.failed} measured requests failed ({top})"
            + (
                ""
                if scenario.sla and scenario.sla.error_rate is not None
                else "; set sla.error_rate to gate on it"
            )
        )
    if rec.token_count_mismatch:
        warnings.append(
            f"{rec.token_count_mismatch} requests: the backend's token count differs from the token stamps"
        )
    for m, h in hists.items():
        if h.over_range:
            warnings.append(f"{m}: {h.over_range} values over 1 h, counted at 1 h")
    if outcome.throttled:
        warnings.append(
            f"{outcome.throttled} requests held back by max_rate (latency counts from the plan)"
        )
    return Validity(valid=not reasons, reasons=reasons, warnings=warnings)


def _judge_lag(name: str, hist: LatencyHistogram, limit_ns: int) -> tuple[str | None, str | None]:
    """Invalid when p99 is over the limit, i.e. more than 1% of samples are late, and more than one.

    With few samples p99 is the maximum, and one late sample is a hiccup, not a client that
    could not keep up: that is a warning (its latency still counts from the intended time).
    """
    n = hist.count
    if not n:
        return None, None
    late = hist.count_above_us(limit_ns // 1000)
    p99 = hist.percentile_ms(99)
    if late > max(1, 0.01 * n):
        return (
            f"{name} p99 {p99:.3f} ms > {limit_ns / 1e6:g} ms ({late} of {n} late): the client could not keep up "
            "(latencies include the delay)"
        ), None
    if late:
        return (
            None,
            f"{name}: {late} of {n} over {limit_ns / 1e6:g} ms (max {hist.hdr.get_max_value() / 1000:.3f} ms)",
        )
    return None, None


LATE_PARTS = {  # a Lateness field: what it was, and what to change when it dominates
    "dispatcher": (
        "the dispatcher (this event loop busy, or this process waiting for a CPU)",
        "give the client a core of its own or more workers (load.workers)",
    ),
    "pool": (
        "waiting for a pooled connection",
        "raise backend.max_connections",
    ),
    "connect": (
        "opening new connections",
        "connections opened at send time (the server closed idle ones: its keep-alive "
        "timeout), or a server slow to accept them",
    ),
    "off_cpu": (
        "this process waiting for a CPU (another process held the core: the machine)",
        "run the server and the client on separate cores (taskset) or machines",
    ),
    "client_work": (
        "the HTTP client's own work on the event loop (other requests' streams)",
        "more workers (load.workers)",
    ),
}


def describe_lateness(late: Sequence[Any], limit_ns: int) -> str:
    """Where the lateness of the sends over ``limit_ns`` went, part by part, largest first,
    and what to change for the largest; empty when no send kept its parts."""
    over = [x for x in late if x.lag > limit_ns]
    if not over:
        return ""
    total = sum(x.lag for x in over)
    parts = sorted(((sum(getattr(x, f) for x in over), f) for f in LATE_PARTS), reverse=True)
    shown = ", ".join(
        f"{LATE_PARTS[f][0]} {ns / 1e6:.1f} ms ({ns / total:.0%})" for ns, f in parts if ns
    )
    return f"; where the {total / 1e6:.1f} ms of lateness went: {shown}; to change: {LATE_PARTS[parts[0][1]][1]}"


def _judge_dispatch(
    scenario: Scenario,
    hist: LatencyHistogram,
    window_s: float | None,
    late: Sequence[Any] = (),
) -> tuple[str | None, str | None]:
    """Dispatch lag judged per request (``_judge_lag``), with one allowance for a burst: every
    request due at t0 cannot all leave at t0, so the n-th waits for the n-1 before it (about
    30 µs each on a 2-core machine: 512 requests, 15 ms) however able the client. What a
    burst's late sends can change is its throughput, by the time to its last send against the
    window: a burst too late by the per-request rule is judged so (its latencies still count
    from t0)."""
    v = scenario.load.validity
    reason, warning = _judge_lag("dispatch lag", hist, v.max_dispatch_lag_p99)
    where = describe_lateness(late, v.max_dispatch_lag_p99)
    reason, warning = (reason and reason + where), (warning and warning + where)
    if reason is None or scenario.load.arrival.kind != "burst" or not window_s:
        return reason, warning
    last_ms = hist.hdr.get_max_value() / 1000
    share = last_ms / 1e3 / window_s
    if share > v.max_burst_send_share:
        return (
            f"dispatch lag: the burst's last send was {last_ms:.1f} ms late, {share:.1%} of the "
            f"{window_s:.3g} s window (over {v.max_burst_send_share:.1%}): the client set the "
            "throughput (latencies include the delay)"
        ), None
    return None, None


def build_result(
    *,
    scenario: Scenario,
    scenario_path: str,
    outcome: RunOutcome | None,
    backend: dict[str, Any],
    environment: dict[str, Any],
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
    identity = dict(
        name=scenario.name,
        started_at=started_at,
        scenario_file=scenario_path,
        scenario=scenario.public_dump(),
        environment=environment,
        backend=backend,
        interrupted_by=interrupted_by,
        commit=environment.get("commit"),
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
    validity, workers, stability = _judged(scenario, outcome, hists, backend.get("warnings", []))
    status = outcome.status if outcome.status != "ok" else ("ok" if validity.valid else "invalid")
    window_s = _window_s(rec)
    throughput = Throughput(
        requests_per_s=_rate(rec.window_completions, window_s),
        output_tokens_per_s=_rate(rec.window_tokens, window_s),
        total_tokens_per_s=_rate(rec.window_tokens + rec.window_input_tokens, window_s),
        output_tokens_in_window=rec.window_tokens,
        window_s=window_s,
    )
    latency = {m: LatencySummary(**hists[m].summary_ms()) for m in ALL_METRICS}
    e2e = latency["e2e"]
    result = RunMetrics(
        status=status,
        requests=_requests(outcome, planned),
        window=_window(outcome, window_s),
        latency_ms=latency,
        throughput=throughput,
        harness=Harness(
            loop_lag_ms=LatencySummary(**outcome.loop_lag.summary_ms()),
            throttled_requests=outcome.throttled,
            failure=outcome.failure,
        ),
        validity=validity,
        stability=stability,
        goodput=_goodput(scenario, rec, window_s),
        sessions=_sessions(outcome),
        workers=workers,
        timeseries=Timeseries(interval_s=rec.interval_ns / 1e9, points=_points(rec)),
        histograms={m: hists[m].encode() for m in ALL_METRICS},
        histograms_over_range={m: hists[m].over_range for m in ALL_METRICS},
        loop_lag_histogram=outcome.loop_lag.encode(),
        definitions=DEFINITIONS,
        output_tokens_per_s=throughput.output_tokens_per_s,
        p50_ms=e2e.p50,
        p95_ms=e2e.p95,
        p99_ms=e2e.p99,
        peak_mem_mb=backend.get("peak_mem_mb"),
        **identity,
    )
    return finish(result, scenario, outcome, seen or Observed(environment), judge)


def _judged(
    scenario: Scenario,
    outcome: RunOutcome,
    hists: dict[str, LatencyHistogram],
    backend_warnings: Sequence[str],
) -> tuple[Validity, list[WorkerStats] | None, Stability | None]:
    """Validity (a failed run says so first; each worker judged too) and stability (an
    overloaded run says so first among the warnings)."""
    rec = outcome.recorder
    validity = judge_validity(scenario, outcome, hists, backend_warnings)
    if outcome.status == "failed":  # the server died, the engine was killed: said first
        validity = Validity(
            valid=False,
            reasons=[
                "the run failed before its end: "
                + (outcome.failure or "the system under test stopped answering")
            ]
            + validity.reasons,
            warnings=validity.warnings,
        )
    workers = _workers(scenario, outcome, validity)
    stability = judge_stability(
        rec.timeline,
        rec.window_start,
        rec.window_end,
        rec.interval_ns,
        open_loop=scenario.load.arrival.kind != "concurrency",
    )
    if stability is not None and not stability.steady:
        validity.warnings.insert(
            0,
            "overloaded: the system did not carry the offered load, so these latencies grow with "
            "the run's length: " + "; ".join(stability.reasons),
        )
    return validity, workers, stability


def _requests(outcome: RunOutcome, planned: int | None) -> Requests:
    rec = outcome.recorder
    return Requests(
        planned=planned,
        sent=outcome.sent,
        never_sent=None if planned is None else max(0, planned - outcome.sent),
        completed=rec.completed,
        failed=rec.failed,
        warmup=rec.warmup,
        cancelled=outcome.cancelled,
        errors_by_type=dict(rec.errors_by_type),
        under_two_tokens=rec.single_token,
        output_tokens=rec.output_tokens_measured,
        input_tokens=rec.input_tokens_measured,
    )


def _window(outcome: RunOutcome, window_s: float | None) -> Window:
    rec, t0 = outcome.recorder, outcome.t0_ns
    return Window(
        start_s=None if rec.window_start is None else (rec.window_start - t0) / 1e9,
        end_s=None if rec.window_end is None else (rec.window_end - t0) / 1e9,
        length_s=window_s,
        run_s=(outcome.end_ns - t0) / 1e9,
        t0_clock_ns=t0,
    )


def _workers(
    scenario: Scenario, outcome: RunOutcome, validity: Validity
) -> list[WorkerStats] | None:
    """Each worker process judged on its own: the run is invalid when any one could not keep
    up, even where the pooled lag hides it (one late worker of eight is 12% of the sends)."""
    if outcome.workers is None:
        return None
    v, n = scenario.load.validity, len(outcome.workers)
    window_s = _window_s(outcome.recorder)
    out = []
    for w in outcome.workers:
        reasons = []
        for reason, _ in (
            _judge_dispatch(scenario, w.dispatch_lag, window_s),
            _judge_lag("event-loop lag", w.loop_lag, v.max_loop_lag_p99),
        ):
            if reason:
                reasons.append(reason)
        if w.status == "lost":
            reasons.append(w.failure or "lost")
        clock = _worker_clock(w)
        reasons += _clock_reasons(clock, v.max_dispatch_lag_p99)
        for reason in reasons:
            validity.reasons.append(f"worker {w.index} of {n}: {reason}")
        out.append(
            WorkerStats(
                index=w.index,
                pid=w.pid,
                status=w.status,
                sent=w.sent,
                completed=w.completed,
                failed=w.failed,
                dispatch_lag_ms=LatencySummary(**w.dispatch_lag.summary_ms()),
                loop_lag_ms=LatencySummary(**w.loop_lag.summary_ms()),
                valid=not reasons,
                reasons=reasons,
                failure=w.failure,
                host=w.where.get("host"),
                ip=w.where.get("ip"),
                node=w.where.get("node"),
                clock=clock,
            )
        )
    validity.valid = not validity.reasons
    return out


def _worker_clock(w: Any) -> WorkerClock | None:
    if w.clock is None:
        return None
    after = w.clock_after
    return WorkerClock(
        method=w.clock.method,
        offset_ms=w.clock.offset_ns / 1e6,
        uncertainty_ms=w.clock.uncertainty_ns / 1e6,
        drift_ms=None if after is None else (after.offset_ns - w.clock.offset_ns) / 1e6,
        drift_uncertainty_ms=None
        if after is None
        else (after.uncertainty_ns + w.clock.uncertainty_ns) / 1e6,
    )


def _clock_reasons(clock: WorkerClock | None, limit_ns: int) -> list[str]:
    """A worker on another host sends on time only as well as its clock offset is known: the
    offset's uncertainty, or its drift over the run, must stay within half the dispatch-lag
    limit (the precision the run asks for)."""
    if clock is None:
        return []
    half = limit_ns / 2e6
    reasons = []
    if clock.uncertainty_ms > half:
        reasons.append(
            f"its clock offset is known only to ±{clock.uncertainty_ms:.3f} ms ({clock.method} "
            f"round trips), more than half the {limit_ns / 1e6:g} ms dispatch-lag limit"
        )
    if clock.drift_ms is not None and clock.drift_uncertainty_ms is not None:
        drift = abs(clock.drift_ms) - clock.drift_uncertainty_ms
        if drift > half:
            reasons.append(
                f"its clock drifted {clock.drift_ms:+.3f} ms against the coordinator's during "
                f"the run, more than half the {limit_ns / 1e6:g} ms dispatch-lag limit"
            )
    return reasons


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
            if rec.window_start is not None and rec.window_end is not None:
                good_in_window += rec.window_start <= done < rec.window_end
    return GoodputResult(
        slo_ms={k: v / 1e6 for k, v in (("ttft", g.ttft), ("tpot", g.tpot), ("e2e", g.e2e)) if v},
        judged=judged,
        good=good,
        attainment=good / judged if judged else None,
        good_requests_per_s=_rate(good_in_window, window_s),
    )


def _window_s(rec: Recorder) -> float | None:
    if rec.window_start is None or rec.window_end is None or rec.window_end <= rec.window_start:
        return None
    return (rec.window_end - rec.window_start) / 1e9


def _rate(n: int, seconds: float | None) -> float | None:
    return None if not seconds else n / seconds


def _points(rec: Recorder) -> list[IntervalPoint]:
    width = rec.interval_ns / 1e9
    by_index = {c["index"]: c for c in rec.closed}
    indices = sorted(set(by_index) | set(rec.token_bins))
    points = []
    for k in indices:
        c = by_index.get(k, {"index": k, "completed": 0, "failed": 0, "histograms": {}})
        points.append(
            IntervalPoint(**c, t_s=k * width, output_tokens_per_s=rec.token_bins.get(k, 0) / width)
        )
    return points
