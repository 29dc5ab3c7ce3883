"""What a result holds besides the requests' own figures, added where the result is built:
what was seen around the requests on the same clock (GPU telemetry, the profile window and its
cost, the roofline, the server's own metrics), the warnings they call for, the SLA verdict, and
the scrub of non-finite numbers. ``build_result`` calls ``finish`` last: the document leaves
the builder complete, and nothing changes it after."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import ValidationError

from loadtest.config.scenario import Scenario
from loadtest.core.json_types import JsonObject
from loadtest.core.step_accounting import StepAccounting
from loadtest.execution.recorder import Recorder
from loadtest.execution.runner import RunOutcome
from loadtest.results.model import BackendFacts, RunMetrics, Stability, Verdict
from loadtest.telemetry import environment
from loadtest.telemetry.environment_section import Environment
from loadtest.telemetry.gpu_section import GpuSection, GpuSource
from loadtest.telemetry.profile_window import ProfileWindow
from loadtest.telemetry.roofline_section import RooflineSection
from loadtest.telemetry.server_section import ServerSection, ServerSource, TtftCompared


@dataclass
class Observed:
    """What was seen around the requests: each sampler that ran (None where none did), the
    files beside metrics.json that could not be written, and notes from the run's set-up."""

    environment: Environment
    gpu: GpuSource | None = None  # stopped
    gpu_off_reason: str = "not sampled"
    gpu_scope: str | None = None  # whose GPUs these are
    profile: ProfileWindow | None = None  # the window that ran
    profile_export: JsonObject = field(default_factory=dict)
    server: ServerSource | None = None  # stopped
    file_problems: dict[str, str] = field(default_factory=dict)  # side file -> why not written
    notes: list[str] = field(default_factory=list)  # set-up warnings (a dataset cut short)


def finish(
    result: RunMetrics,
    scenario: Scenario,
    outcome: RunOutcome,
    seen: Observed,
    judge: Callable[[RunMetrics], Verdict | None] | None = None,
) -> RunMetrics:
    """The result with every section and warning that what was seen calls for, its verdict,
    and no NaN or infinity."""
    rec = outcome.recorder
    _add_gpu(result, rec, outcome.t0_ns, seen)
    result.validity.warnings += environment.warnings(seen.environment, result.gpu)
    result.validity.warnings += _backend_warnings(result.backend)
    if seen.profile is not None:
        window = seen.profile
        result.profile = window.summary(outcome.t0_ns, rec.profiled, seen.profile_export)
        result.requests.profiled = rec.profiled
        result.validity.warnings += window.warnings
        _judge_around_profiler(result, scenario, rec, window)
    result.roofline = _roofline(result, seen.environment)
    result.validity.warnings += seen.notes
    if seen.server is not None:
        result.server = _server_section(seen.server, rec, outcome.t0_ns)
        _file_problem(result, seen, "server.csv")
        models = result.traffic.models if result.traffic is not None else None
        for name, own in (result.server.by_model or {}).items():
            if models and name in models:  # the server's view of each model beside the client's
                models[name].server = own
    if judge is not None:
        result.sla = judge(result)
    return null_non_finite(result)


def _add_gpu(result: RunMetrics, rec: Recorder, t0_ns: int, seen: Observed) -> None:
    sampler = seen.gpu
    if sampler is None:
        result.gpu = GpuSection.unavailable(seen.gpu_off_reason)
        return
    span = (rec.window.start, rec.window.end) if rec.window.start and rec.window.end else None
    result.gpu = sampler.summary(t0_ns, span, rec.window.tokens)
    if result.gpu.available and seen.gpu_scope:
        result.gpu.scope = seen.gpu_scope
    _file_problem(result, seen, "gpu.csv")


def _file_problem(result: RunMetrics, seen: Observed, name: str) -> None:
    if name in seen.file_problems:
        result.validity.warnings.append(f"{name} could not be written: {seen.file_problems[name]}")


def _backend_warnings(backend: BackendFacts) -> list[str]:
    out = []
    if backend.recompiles_in_window:
        out.append(
            f"torch.compile built {backend.recompiles_in_window} graph(s) inside the "
            "measurement window: those requests waited for a compilation (warm-up missed a shape)"
        )
    if backend.cudagraph_skips:
        out.append(
            f"torch.compile ran {backend.cudagraph_skips} compiled graph(s) without a CUDA graph "
            "around them: each of their steps paid its kernel launches (the engine's log says why)"
        )
    if backend.stamp_mismatches:
        out.append(
            f"{backend.stamp_mismatches} batch(es) had a different number of token stamps than "
            "tokens generated: the per-step stamp hook did not match this transformers version; "
            "report it"
        )
    return out


def _judge_around_profiler(
    result: RunMetrics, scenario: Scenario, rec: Recorder, window: ProfileWindow
) -> None:
    """A profiler slows the engine while it records; near capacity the backlog that forms may
    take long to drain, or never does. That is the capture's cost, said in a warning, not an
    overloaded system: a run unsteady only because of it is judged on its window outside the
    capture and the backlog's drain, and said to be perturbed."""
    cost = window.perturbation(rec.t0)
    if cost is None:
        return
    b0, peak = cost.backlog_at_open or 0, cost.backlog_peak
    if peak <= b0 + 3 * math.sqrt(b0 + 1):  # no more than a queue's own wander
        return
    drained = (
        f"drained {cost.drain_s:.3g} s after the capture closed"
        if cost.drain_s is not None
        else "had not drained by the end"
    )
    cost_text = (
        f"the profiler's capture lasted {cost.lasted_s:.3g} s"
        + (f" for {cost.asked_s:.3g} s asked" if cost.asked_s else "")
        + f" and raised the backlog from {b0} to {peak} requests, which {drained}; "
        f"{rec.profiled} requests sent until then are flagged"
        + (" and kept out of the figures" if window.spec.exclude_from_stats else "")
    )
    if result.stability is None or result.stability.steady:
        result.validity.warnings.append(cost_text)
        return
    outside = _judged_outside(scenario, rec, window)
    if outside is not None and not all(v.steady for v in outside):
        result.validity.warnings.append(cost_text)  # overloaded outside the capture too
        return
    note = f"perturbed by the profiler, not overloaded: {cost_text}; " + (
        "outside them the run was steady"
        if outside
        else "no part of the window was outside them to judge the run's steadiness on "
        "(open the capture later, or run longer); its figures are no steady state's"
    )
    base = outside[0] if outside else result.stability
    result.stability = base.model_copy(update={"reasons": [note], "steady": bool(outside)})
    result.validity.warnings = [
        note if w.startswith("overloaded:") else w for w in result.validity.warnings
    ]


def _judged_outside(
    scenario: Scenario, rec: Recorder, window: ProfileWindow
) -> list[Stability] | None:
    """Stability verdicts on the window's spans outside the capture and its drain (before it
    opened; after the backlog drained), each of at least five intervals; None when there is
    no such span."""
    from loadtest.results.stability import judge as judge_stability

    open_loop = scenario.load.arrival.kind != "concurrency"
    spans = [(rec.window.start, window.start_ns)]
    if window.drained_ns is not None:
        spans.append((window.drained_ns, rec.window.end))
    verdicts = [
        judge_stability(rec.timeline, a, b, rec.interval_ns, open_loop=open_loop)
        for a, b in spans
        if a is not None and b is not None and b - a >= 5 * rec.interval_ns
    ]
    judged = [v for v in verdicts if v is not None]
    return judged or None


def _roofline(metrics: RunMetrics, env: Environment) -> RooflineSection | None:
    """MBU/MFU and a diagnosis, for in-process models (transformers)."""
    backend = metrics.backend
    acct = backend.roofline_acct
    config, weights, width = backend.shape_config, backend.parameter_bytes, backend.dtype_bytes
    if acct is None or not config or weights is None or width is None:
        return None
    from loadtest.telemetry import roofline

    estimated = None
    if not acct.decode_steps and backend.mode == "continuous":
        acct, estimated = _estimated(metrics), roofline.ESTIMATED_NOTE
    shape = roofline.model_shape(config, weights, width)
    name = backend.device_name
    gpu = env.gpu_named(name)
    uuid = gpu.uuid if gpu is not None else None
    result = roofline.analyse(shape, acct, roofline.peaks_for(name, uuid))
    if estimated:
        result.estimated = estimated
    result.diagnosis = roofline.diagnose(roofline.Signals.of(result, metrics.gpu, metrics.profile))
    return result


def _estimated(metrics: RunMetrics) -> StepAccounting:
    """Continuous batching's manager times no steps: its accounting from the run's figures."""
    from loadtest.telemetry import roofline

    itl = (metrics.latency_ms or {}).get("itl")
    t, r = metrics.throughput, metrics.requests
    return roofline.estimate_from_latencies(
        itl.mean if itl else None,
        t.output_tokens_per_s if t else None,
        t.window_s if t else None,
        r.completed,
        r.input_tokens,
        r.output_tokens,
    )


def _server_section(server: ServerSource, rec: Recorder, t0_ns: int) -> ServerSection:
    """``server``, with the server's TTFT beside the client's where it has one."""
    span = (rec.window.start, rec.window.end) if rec.window.start and rec.window.end else None
    summary = server.summary(t0_ns, span)
    compared = _ttft_compared(summary, rec.first_tokens, t0_ns)
    if compared is not None:
        summary.ttft_compared = compared
    return summary


def _ttft_compared(
    summary: ServerSection, first_tokens: list[tuple[int, int]], t0_ns: int
) -> TtftCompared | None:
    """The server's mean TTFT against the client's over the same requests: every request whose
    first token came between the two samples the server's figure is taken from (warm-up and
    profiled ones included, as the server's histogram has them)."""
    ttft = summary.metric("ttft_s")
    if not ttft or not ttft.window_count or ttft.window_mean is None or not first_tokens:
        return None
    start, end = (t0_ns + round(s * 1e9) for s in summary.sampled_s or (0.0, 0.0))
    mine = [service for first, service in first_tokens if start < first <= end]
    if not mine:
        return None
    server_ms = ttft.window_mean * 1e3
    client_ms = sum(mine) / len(mine) / 1e6
    return TtftCompared(
        server_mean_ms=server_ms,
        server_requests=int(ttft.window_count),
        client_service_mean_ms=client_ms,
        client_requests=len(mine),
        difference_ms=client_ms - server_ms,
        note="the same requests: those whose first token came between the two samples "
        "(warm-up and profiled ones included). The client's TTFT runs from its request's "
        "bytes leaving to the first token's chunk arriving; the server's (vLLM) from the "
        "request reaching its engine, after the HTTP server parsed it, to the first token "
        "leaving the engine, before it is framed and streamed. The difference is the network, "
        "HTTP parsing and the stream's delivery.",
    )


def null_non_finite(result: RunMetrics) -> RunMetrics:
    """Every NaN or infinity in the result as null (JSON has neither), said where in
    ``validity.warnings``: one bad figure must not cost the whole result."""
    found: list[str] = []

    def walk(node: object, path: str) -> object:
        if isinstance(node, float) and not math.isfinite(node):
            found.append(path)
            return None
        if isinstance(node, dict):
            for k, v in node.items():
                node[k] = walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                node[i] = walk(v, f"{path}[{i}]")
        return node

    doc = result.model_dump(by_alias=True)
    walk(doc, "")  # in place: the top is a dict
    if not found:
        return result
    doc["validity"]["warnings"].append(
        f"not a finite number, written as null: {', '.join(found)} (a bug in loadtest: report it)"
    )
    try:
        return RunMetrics.model_validate(doc)
    except ValidationError as exc:
        # a figure a section cannot be without: that section goes, the rest of the result stays
        dropped = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
        if not all(RunMetrics.model_fields[k].default is None for k in dropped if k in doc):
            raise
        for key in dropped:
            doc[key] = None
        doc["validity"]["warnings"].append(
            f"left out, a figure it needs not being finite: {', '.join(dropped)}"
        )
        return RunMetrics.model_validate(doc)
