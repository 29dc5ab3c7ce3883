"""Whether a run's numbers can be trusted, judged from the numbers: the harness's own lateness
(dispatch and event-loop lag, split by cause; a burst by its last send), each worker's share and
clock, and whether the system carried the offered load. Validity is separate from pass/fail: a
run whose client fell behind is invalid whatever its latencies say."""

from __future__ import annotations

from collections.abc import Sequence

from loadtest.config.scenario import Scenario
from loadtest.core.histogram import LatencyHistogram
from loadtest.execution import prompts_ahead
from loadtest.execution.recorder import Recorder
from loadtest.execution.request import Lateness
from loadtest.execution.runner import RunOutcome
from loadtest.execution.worker_part import WorkerPart
from loadtest.results.model import (
    LatencySummary,
    Stability,
    Validity,
    WorkerClock,
    WorkerStats,
)
from loadtest.results.stability import judge as judge_stability

# The loop thread's busy share past which its stamps wait on it: Locust's own CPU warning is at
# 90% (docs/benchmarks.md §9 has loadtest's share beside its ITL error).
LOOP_BUSY_WARN = 0.9
# A token's stamp waits on the event loop by up to its lag. Under this p99 the wait is within
# what any client's stamps carry (an idle loop's wake-up; uvloop's timers count whole ms), and
# the run is not judged invalid for it; a quarter of the typical gap gets a warning.
STAMP_DELAY_FLOOR_MS = 1.0
STAMP_DELAY_WARN_SHARE, STAMP_DELAY_WARN_MS = 0.25, 0.25


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
    stamps = (
        judge_stamp_delay(
            outcome.loop_lag, hists.get("tpot"), v.max_stamp_delay_share, client_remedy(scenario)
        )
        if scenario.backend.stamps_in_client_loop
        else (None, None)  # the engine process stamps its tokens: this loop's lag is not in them
    )
    for reason, warning in (
        _judge_dispatch(scenario, hists["dispatch_lag"], window_seconds(rec), rec.late_sends),
        _judge_lag("event-loop lag", outcome.loop_lag, v.max_loop_lag_p99),
        stamps,
    ):
        if reason:
            reasons.append(reason)
        if warning:
            warnings.append(warning)
    late = len(reasons)  # so far, every reason is the client's own lateness
    if rec.errors_by_type.get("client_out_of_files"):
        reasons.append(
            f"{rec.errors_by_type['client_out_of_files']} requests failed because this client ran "
            "out of file descriptors (EMFILE): the failures are the client's, not the server's; "
            "raise ulimit -n"
        )
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
    if outcome.loop_busy is not None and outcome.loop_busy >= LOOP_BUSY_WARN:
        warnings.append(
            f"the event loop was busy {outcome.loop_busy:.0%} of the run: at one core's limit, "
            "every read and send waits on it, so stamps (ITL, TTFT) may carry the client's own "
            f"delay; {client_remedy(scenario)}"
        )
    if outcome.prompts_at_send:
        warnings.append(
            f"{outcome.prompts_at_send} prompts were made as they were sent, past the "
            f"{prompts_ahead.AHEAD_TOKENS:,} prompt tokens made before the run: making one holds the event "
            "loop (about 2.7 µs a token), so those sends and the tokens read meanwhile may be "
            "late; a shorter run, or more workers (each makes its own share), makes them all ahead"
        )
    if outcome.throttled:
        warnings.append(
            f"{outcome.throttled} requests held back by max_rate (latency counts from the plan)"
        )
    slot = hists.get("slot_wait")
    waited = 0 if slot is None or not slot.count else slot.count_above_us(0)
    if slot is not None and waited:
        warnings.append(
            f"{waited} of {slot.count} requests waited for one of load.max_in_flight's "
            f"{scenario.load.max_in_flight} slots, up to {slot.percentile_ms(100):.4g} ms "
            f"(p99 {slot.percentile_ms(99):.4g} ms): the "
            "wait is in TTFT and E2E (they count from the plan), and apart as slot_wait; it "
            "is the cap's, not the client's lateness"
        )
    return Validity(
        valid=not reasons,
        reasons=reasons,
        warnings=warnings,
        client_lateness_only=bool(reasons) and len(reasons) == late,
    )


def stamp_delay_ms(scenario: Scenario, loop_lag: LatencyHistogram) -> float:
    """How late a token's stamp may be for this client's own loop: its lag p99 where tokens
    are stamped when this loop reads them, 0 where the engine process stamps them."""
    if not scenario.backend.stamps_in_client_loop or not loop_lag.count:
        return 0.0
    return loop_lag.percentile_ms(99)


def client_remedy(scenario: Scenario) -> str:
    """What to change when the client's loop was the limit: more client processes, unless the
    system under test runs in that loop itself (the simulator), whose work is not the client's."""
    if scenario.backend.serves_in_client_loop:
        return (
            f"the {scenario.backend.kind} backend serves in this same event loop, so part of "
            "that work is the simulated server's, not the client's: simulate less (fewer "
            "requests or tokens a second) rather than add client workers"
        )
    return "add workers (load.workers) or send less from each"


def too_late(hist: LatencyHistogram, limit_ns: int) -> bool:
    """Whether more than 1% of ``hist``'s samples, and more than one, are over ``limit_ns``:
    the client could not keep up (the rule of both lag checks, live and at the end)."""
    return hist.count_above_us(limit_ns // 1000) > max(1, 0.01 * hist.count)


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
    if too_late(hist, limit_ns):
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


def judge_stamp_delay(
    loop_lag: LatencyHistogram,
    tpot: LatencyHistogram | None,
    max_share: float,
    remedy: str = "add workers (load.workers) or send less from each",
) -> tuple[str | None, str | None]:
    """Whether token stamps waited on the event loop for a share of what they measure: its
    lag p99 against the typical gap between tokens (TPOT p50). Invalid past ``max_share`` (and
    ``STAMP_DELAY_FLOOR_MS``); a warning past a quarter of it."""
    if tpot is None or not tpot.count or not loop_lag.count:
        return None, None
    lag, gap = loop_lag.percentile_ms(99), tpot.percentile_ms(50)
    if gap <= 0:
        return None, None
    share = lag / gap
    said = (
        f"event-loop lag p99 {lag:.3g} ms is {share:.0%} of the typical gap between tokens "
        f"(TPOT p50 {gap:.3g} ms): a token is stamped when the loop takes its read"
    )
    if share > max_share and lag > STAMP_DELAY_FLOOR_MS:
        return (
            f"{said}, so the client's own delay is as large as what it measures (ITL, TPOT); "
            f"{remedy}"
        ), None
    if share > STAMP_DELAY_WARN_SHARE * max_share and lag > STAMP_DELAY_WARN_MS:
        return None, f"{said}: ITL and TPOT percentiles may read up to that much high"
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
        "give the client a core of its own (taskset; the server apart, where it runs here), "
        "or let it be: each SLA and gate check counts this lateness against the server, so "
        "verdicts still decide where they can (load.validity.max_dispatch_lag_p99 sets how "
        "late is invalid)",
    ),
    "client_work": (
        "the HTTP client's own work on the event loop (other requests' streams)",
        "more workers (load.workers)",
    ),
}


def describe_lateness(
    late: Sequence[Lateness], limit_ns: int, loop_remedy: str | None = None
) -> str:
    """Where the lateness of the sends over ``limit_ns`` went, part by part, largest first,
    and what to change for the largest; empty when no send kept its parts. ``loop_remedy``
    replaces the advice for the parts spent in the client's loop (``client_remedy``)."""
    over = [x for x in late if x.lag > limit_ns]
    if not over:
        return ""
    total = sum(x.lag for x in over)
    parts = sorted(((sum(getattr(x, f) for x in over), f) for f in LATE_PARTS), reverse=True)
    shown = ", ".join(
        f"{LATE_PARTS[f][0]} {ns / 1e6:.1f} ms ({ns / total:.0%})" for ns, f in parts if ns
    )
    largest = parts[0][1]
    remedy = LATE_PARTS[largest][1]
    if loop_remedy and largest in ("dispatcher", "client_work"):
        remedy = loop_remedy
    return f"; where the {total / 1e6:.1f} ms of lateness went: {shown}; to change: {remedy}"


def _judge_dispatch(
    scenario: Scenario,
    hist: LatencyHistogram,
    window_s: float | None,
    late: Sequence[Lateness] = (),
) -> tuple[str | None, str | None]:
    """Dispatch lag judged per request (``_judge_lag``), with one allowance for a burst: every
    request due at t0 cannot all leave at t0, so the n-th waits for the n-1 before it (about
    30 µs each on a 2-core machine: 512 requests, 15 ms) however able the client. What a
    burst's late sends can change is its throughput, by the time to its last send against the
    window: a burst too late by the per-request rule is judged so (its latencies still count
    from t0)."""
    v = scenario.load.validity
    reason, warning = _judge_lag("dispatch lag", hist, v.max_dispatch_lag_p99)
    in_loop = client_remedy(scenario) if scenario.backend.serves_in_client_loop else None
    where = describe_lateness(late, v.max_dispatch_lag_p99, in_loop)
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


def judge_run(
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
        rec.window.start,
        rec.window.end,
        rec.interval_ns,
        open_loop=scenario.load.arrival.kind != "concurrency",
    )
    if stability is not None and stability.steady is False:
        validity.warnings.insert(
            0,
            "overloaded: the system did not carry the offered load, so these latencies grow with "
            "the run's length: " + "; ".join(stability.reasons),
        )
    return validity, workers, stability


def _workers(
    scenario: Scenario, outcome: RunOutcome, validity: Validity
) -> list[WorkerStats] | None:
    """Each worker process judged on its own: the run is invalid when any one could not keep
    up, even where the pooled lag hides it (one late worker of eight is 12% of the sends)."""
    if outcome.workers is None:
        return None
    v, n = scenario.load.validity, len(outcome.workers)
    window_s = window_seconds(outcome.recorder)
    out = []
    lateness_only = validity.client_lateness_only or validity.valid
    for w in outcome.workers:
        reasons = []
        for reason, _ in (
            _judge_dispatch(scenario, w.dispatch_lag, window_s),
            _judge_lag("event-loop lag", w.loop_lag, v.max_loop_lag_p99),
        ):
            if reason:
                reasons.append(reason)
        late = len(reasons)
        if w.status == "lost":
            reasons.append(w.failure or "lost")
        clock = _worker_clock(w)
        reasons += _clock_reasons(clock, v.max_dispatch_lag_p99)
        lateness_only = lateness_only and len(reasons) == late
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
    validity.client_lateness_only = bool(validity.reasons) and lateness_only
    return out


def _worker_clock(w: WorkerPart) -> WorkerClock | None:
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


def window_seconds(rec: Recorder) -> float | None:
    if rec.window.start is None or rec.window.end is None or rec.window.end <= rec.window.start:
        return None
    return (rec.window.end - rec.window.start) / 1e9
