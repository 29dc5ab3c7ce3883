"""Parts of a report as label/value rows every format renders (terminal, Markdown, HTML): the
latencies, the API's and traffic's figures, goodput, sessions, stability, client workers and
steps (what was seen inside the run, the GPU, roofline, profile and server: ``inside``)."""

from __future__ import annotations

from loadtest.config.apis import STREAM_METRICS
from loadtest.execution.recorder import ALL_METRICS
from loadtest.reporters.figures import text4, text_of
from loadtest.results.model import (
    AnswersResult,
    ApiResult,
    BackendFacts,
    Check,
    GoodputResult,
    Requests,
    RunMetrics,
    ServerMetrics,
    SessionsResult,
    Stability,
    StepsResult,
    Throughput,
    WorkerStats,
)


def latency_rows(m: RunMetrics) -> list[str]:
    """The latency metrics a report shows: those the run has, without the token stream's where
    its API streams none (embeddings, rerank: no TTFT is claimed)."""
    streams = m.api is None or m.api.streams_tokens
    return [
        k for k in ALL_METRICS if k in (m.latency_ms or {}) and (streams or k not in STREAM_METRICS)
    ]


def api_rows(api: ApiResult | None, t: Throughput | None) -> list[tuple[str, str]]:
    """Label/value rows of what the API carried: inputs a request and their rate, reasoning
    and answer tokens, tool calls and structured answers checked, media sent."""
    if api is None:
        return []
    rows = [("API", api.name + ("" if api.streams_tokens else " (one JSON answer, no stream)"))]
    unit = "documents" if api.name == "rerank" else "inputs"
    if api.inputs_per_request is not None:
        rows.append((f"{unit} per request", str(api.inputs_per_request)))
        if t is not None:
            rows.append((f"{unit}/s", text_of(t.inputs_per_s, "{:.4g}")))
            rows.append(("input tokens/s", text_of(t.input_tokens_per_s, "{:.4g}")))
    if api.reasoning_tokens is not None:
        rows.append(("reasoning / answer tokens", f"{api.reasoning_tokens} / {api.answer_tokens}"))
    tc = api.tool_calls
    if tc is not None:
        rows.append(
            (
                "tool calls",
                f"{tc.calls} in {tc.requests_with_calls} of {tc.requests} requests "
                f"({tc.offered} tools offered, tool_choice {tc.choice})",
            )
        )
        rows.append(
            (
                "tool calls not usable",
                f"{tc.bad_json} not JSON, {tc.schema_mismatch} break the schema, "
                f"{tc.unknown_tool} name no offered tool; {tc.cut_at_length} cut by the "
                f"output length; {tc.missing} requests made no required call",
            )
        )
    sc = api.structured
    if sc is not None:
        rows.append(
            (
                f"structured answers ({sc.format})",
                f"{sc.checked} checked: {sc.bad_json} not JSON, {sc.schema_mismatch} break "
                f"the schema, {sc.cut_at_length} cut by the output length",
            )
        )
    media = api.media
    if media is not None and media.images_per_request:
        rows.append(
            (
                "images per request",
                f"{media.images_per_request} x {media.image_size}, "
                f"{text_of(media.image_bytes_mean, '{:.4g}')} bytes each (mean, encoded)",
            )
        )
    if media is not None and media.audio_per_request:
        rows.append(
            (
                "audio per request",
                f"{media.audio_per_request} x {media.audio_seconds:g} s WAV, "
                f"{text_of(media.audio_bytes_mean, '{:.4g}')} bytes each (mean)",
            )
        )
    return rows


def goodput_rows(goodput: GoodputResult | None) -> list[tuple[str, str]]:
    """Label/value rows of goodput: the objectives, attainment and good requests a second."""
    if not goodput:
        return []
    slo = ", ".join(f"{k} <= {v:g} ms" for k, v in goodput.slo_ms.items())
    att = goodput.attainment
    rps = goodput.good_requests_per_s
    return [
        ("objectives (every one, per request)", slo),
        (
            "attainment",
            "-" if att is None else f"{att:.1%} ({goodput.good} of {goodput.judged} finished)",
        ),
        ("goodput", "-" if rps is None else f"{rps:.4g} good requests/s"),
    ]


def sessions_rows(sessions: SessionsResult | None) -> list[tuple[str, str]]:
    """Label/value rows of multi-turn sessions: how they ended, TTFT first vs later turns, and
    TTFT and prompt length by turn."""
    if not sessions:
        return []
    g = text4
    s = sessions
    first, later = s.ttft_first_turn_ms, s.ttft_later_turns_ms
    rows = [
        (
            "sessions",
            f"{s.started} started, {s.completed} completed, {s.ended_by_failure} ended "
            f"by a failed turn, "
            + (f"{s.ended_by_cancel} by a cancelled one, " if s.ended_by_cancel else "")
            + f"{s.cut_at_window_end} cut at the window's end",
        ),
        ("history", f"{s.history}; {s.turns_sent} turns sent"),
        (
            "TTFT first turn / later turns",
            f"p50 {g(first.p50)} / {g(later.p50)} ms, p99 {g(first.p99)} / {g(later.p99)} ms",
        ),
    ]
    for t in s.per_turn:
        rows.append(
            (
                f"turn {t.turn}",
                f"{t.requests} requests, prompt {g(t.input_tokens_mean)} tokens mean, TTFT "
                f"p50 {g(t.ttft_ms.p50)} ms, p99 {g(t.ttft_ms.p99)} ms",
            )
        )
    return rows


def steadiness(stability: Stability) -> str:
    """The stability verdict in a word: steady, OVERLOADED, or unknown (with too little to tell)."""
    return {True: "steady", False: "OVERLOADED", None: "unknown"}[stability.steady]


def stability_rows(stability: Stability | None) -> list[tuple[str, str]]:
    """Label/value rows of the stability judgement: the verdict, rates, backlog, trends."""
    if not stability:
        return []
    g = text4
    rows = [
        ("verdict", steadiness(stability)),
        ("offered req/s", g(stability.offered_rps) if stability.open_loop else "closed loop"),
        ("delivered req/s", g(stability.delivered_rps)),
        (
            "backlog at window start / end",
            f"{stability.backlog_at_start} / {stability.backlog_at_end} requests",
        ),
    ]
    for name, t in (("TTFT", stability.ttft_trend), ("queue time", stability.queue_trend)):
        if t:
            rows.append(
                (
                    f"{name} trend",
                    f"{g(t.slope_ms_per_s)} ms/s [99%: {g(t.slope_lo)}, {g(t.slope_hi)}], "
                    f"rise {g(t.rise_ms)} ms vs median {g(t.median_ms)} ms",
                )
            )
    rows += [("why", r) for r in stability.reasons]
    return rows


def workers_rows(
    workers: list[WorkerStats] | None, backend: BackendFacts | None
) -> list[tuple[str, str]]:
    """Label/value rows of the client workers: where they ran, what each sent, how late, and
    (on other hosts) how well its clock was known."""
    if not workers:
        return []
    ray = backend.ray if backend else None
    nodes = {w.node for w in workers if w.node}
    n = len(workers)
    where = (
        f"{n} Ray actor{'s' * (n > 1)} on {len(nodes)} node(s)"
        if ray
        else f"{n} process{'es' * (n > 1)} here"
    )
    rows = [("workers", where)]
    if ray:
        rows.append(("Ray cluster", f"{ray['address']} (Ray {ray['ray']}, {ray['cpus']} CPUs)"))
    worst = max(workers, key=lambda w: w.dispatch_lag_ms.p99 or 0.0)
    rows.append(
        (
            "worst dispatch lag p99",
            f"{text_of(worst.dispatch_lag_ms.p99)} ms (worker {worst.index})",
        )
    )
    for w in workers:
        parts = [w.status if w.valid else f"{w.status}, could not keep up"]
        if w.host:
            parts.append(f"{w.host} {w.ip or ''} node {(w.node or '?')[:8]}")
        parts.append(f"sent {w.sent}, done {w.completed}, failed {w.failed}")
        parts.append(
            f"dispatch lag p99 {text_of(w.dispatch_lag_ms.p99)} ms, "
            f"loop lag p99 {text_of(w.loop_lag_ms.p99)} ms"
        )
        c = w.clock
        if c:
            drift = "" if c.drift_ms is None else f", drift {c.drift_ms:+.3f} ms"
            parts.append(
                f"clock {c.offset_ms:+.3f} ± {c.uncertainty_ms:.3f} ms ({c.method}){drift}"
            )
        rows.append((f"worker {w.index}", "; ".join(parts)))
    return rows


def steps_rows(steps: StepsResult | None) -> list[tuple[str, str]]:
    """Label/value rows of a staircase: each step's verdict, rate and percentiles, then the knee."""
    if steps is None:
        return []
    rows = []
    for st in steps.steps:
        verdict = (
            "-"
            if st.stability is None
            else {True: "steady", False: "NOT carried", None: "unknown"}[st.stability.steady]
        )
        rows.append(
            (
                f"step {st.index}: {st.rate:g} req/s ({st.start_s:g}-{st.end_s:g} s)",
                f"{verdict}; delivered {text_of(st.delivered_rps, '{:.4g}')} req/s; "
                f"TTFT p50 {text4(st.ttft_ms.p50)} p99 {text4(st.ttft_ms.p99)} ms; "
                f"E2E p50 {text4(st.e2e_ms.p50)} p99 {text4(st.e2e_ms.p99)} ms; {st.requests} requests",
            )
        )
    knee = steps.knee
    if knee is None:
        rows.append(("knee", "none: every step was carried"))
    else:
        carried = (
            f"carried {knee.last_steady_rate:g} req/s, not {knee.first_unsteady_rate:g}"
            if knee.last_steady_rate is not None
            else f"not even the first step, {knee.first_unsteady_rate:g} req/s"
        )
        rows.append(("knee", f"{carried} (step {knee.step}): " + "; ".join(knee.reasons)))
    return rows


def requests_line(r: Requests) -> str:
    """The request counts in words: completed, failed, cancelled (by the plan), warm-up, and
    those a stopped run left in flight."""
    parts = [f"{r.completed} completed", f"{r.failed} failed"]
    if r.cancelled:
        parts.append(f"{r.cancelled} cancelled (load.cancel)")
    parts.append(f"{r.warmup} warmup")
    if r.interrupted:
        parts.append(f"{r.interrupted} interrupted")
    if r.connection_retries:
        parts.append(
            f"{r.connection_retries} sent on a new connection (the server had closed the "
            "kept-alive one before they were written)"
        )
    return ", ".join(parts)


def traffic_rows(m: RunMetrics) -> list[tuple[str, str]]:
    """Label/value rows of the traffic beyond arrivals: its text, a replayed trace (with the
    server's prefix-cache hit rate beside the trace's own reuse), cancellations (with what the
    server generated that nobody read), and each model of a mix."""
    t = m.traffic
    if t is None:
        return []
    server = m.server
    rows = [("text", "passages of the corpus" if t.text == "natural" else "random tokens")]
    if t.trace is not None:
        tr = t.trace
        reuse = (
            ""
            if tr.prefix_reuse is None
            else f"; {100 * tr.prefix_reuse:.1f}% of prompt tokens repeat an earlier prefix"
        )
        hit_rate = server.metric("prefix_cache_hit_rate") if server else None
        hit = hit_rate.window if hit_rate else None
        seen = "" if hit is None else f"; the server's prefix cache hit {100 * hit:.1f}%"
        rows.append(
            (
                "trace",
                f"{tr.format}, {tr.requests} requests, lengths from the {tr.lengths}{reuse}{seen}",
            )
        )
    c = t.cancel
    if c is not None:
        when = (
            f"after {c.after_s:g} s" if c.after_s is not None else f"after {c.after_tokens} tokens"
        )
        planned = "" if c.planned is None else f" of {c.planned} marked"
        rows.append(
            (
                "cancelled",
                f"{c.cancelled}{planned} ({100 * c.fraction:g}% {when}); {c.tokens_received} "
                f"tokens received before; cancelled at p50 {text4(c.cancelled_at_ms.p50)} ms"
                + ("" if c.ttft_ms is None else f", their TTFT p50 {text4(c.ttft_ms.p50)} ms"),
            )
        )
        tokens = server.metric("generation_tokens") if server else None
        generated = tokens.run_change if tokens else None
        if generated is not None:
            unread = max(0, round(generated) - c.delivered_tokens)
            per = f" ({unread / c.cancelled:.3g} a cancellation)" if c.cancelled else ""
            rows.append(
                (
                    "server after cancels",
                    f"generated {round(generated)} tokens, the client read {c.delivered_tokens}: "
                    f"{unread} nobody read{per}",
                )
            )
        running = server.metric("requests_running") if server else None
        if running is not None and running.max is not None:
            rows.append(
                (
                    "server running requests",
                    f"peak {running.max:g}, {running.last or 0:g} at the last sample "
                    "(server.csv has each sample: it drops as the server sees a client leave)",
                )
            )
    shares = [("model", t.models), ("endpoint", t.endpoints)]
    for what, name, mr in ((w, n, r) for w, s in shares for n, r in (s or {}).items()):
        lat = mr.latency_ms
        rows.append(
            (
                f"{what} {name}",
                f"{mr.completed} completed, {mr.failed} failed"
                + (f", {mr.cancelled} cancelled" if mr.cancelled else "")
                + f"; {text_of(mr.requests_per_s, '{:.4g}')} req/s, "
                f"{text_of(mr.output_tokens_per_s, '{:.4g}')} tok/s; TTFT p50 {text4(lat['ttft'].p50)} "
                f"p99 {text4(lat['ttft'].p99)} ms; ITL p99 {text4(lat['itl'].p99)} ms; "
                f"E2E p99 {text4(lat['e2e'].p99)} ms" + _server_of_share(mr.server),
            )
        )
    return rows


def _server_of_share(server: ServerMetrics | None) -> str:
    """A model's own server-side queue time and TTFT (means over the window), where its server
    labels its series by model."""
    if not server:
        return ""
    parts = []
    for common, label in (("queue_s", "queue"), ("ttft_s", "TTFT")):
        own = server.get(common)
        mean = own.window_mean if own else None
        if mean is not None:
            parts.append(f"{label} mean {mean * 1e3:.4g} ms")
    return f"; the server's: {', '.join(parts)}" if parts else ""


def sla_cells(check: Check) -> tuple[str, str, str]:
    """An SLA check's observed value, the same with the client's own share taken off (marked
    ``*`` where that share could change the verdict), and its bound, each with its unit: the
    one spelling the terminal, Markdown and HTML reports share."""
    unit = f" {check.unit}" if check.unit else ""
    observed = "-" if check.observed is None else f"{check.observed:.4g}{unit}"
    free = "-" if check.client_free is None else f"{check.client_free:.4g}{unit}"
    if check.client_could_change:
        free += " *"
    return observed, free, f"{check.op} {check.bound:g}{unit}"


SLA_COLUMNS = ("check", "verdict", "observed", "client's share off", "bound", "evidence")
CLIENT_NOTE = (
    "client's share off: the figure with the client's own measured lateness taken off; the "
    "server's true figure lies between it and the observed one (* where that could change "
    "the verdict)"
)


def answers_rows(a: AnswersResult | None) -> list[tuple[str, str]]:
    """The answer check: how many answers under load matched their reference alone, with
    the interval, where the diverged ones parted, and what the reference pass cost."""
    if a is None:
        return []
    if not a.compared or a.match_rate is None or a.match_interval is None:
        rows = [("answers matched", f"none compared ({a.unanswered} failed under load)")]
    else:
        lo, hi = a.match_interval
        rows = [
            (
                "answers matched",
                f"{a.matched} of {a.compared} ({a.match_rate:.1%}; {lo:.1%}..{hi:.1%} at "
                f"{a.confidence:.0%}), on their {a.compared_on}",
            )
        ]
    if a.first_divergence:
        d = a.first_divergence
        rows.append(
            (
                "first divergence",
                f"at character {d['min']:.0f} .. {d['max']:.0f} (median {d['p50']:.0f})",
            )
        )
    for label, by in (("endpoint", a.by_endpoint), ("model", a.by_model)):
        for name, t in (by or {}).items():
            rows.append((f"  {label} {name}", f"{t.matched} of {t.compared} matched"))
    share = "" if a.reference_share is None else f", {a.reference_share:.1%} of the run"
    rows.append(
        ("reference pass", f"{a.reference_requests} requests alone, {a.reference_s:.3g} s{share}")
    )
    return rows
