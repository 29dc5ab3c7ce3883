"""A run in ``vllm bench serve``'s JSON layout (``loadtest report RUN --format vllm``), so the
dashboards and harnesses built for that file (llm-d-benchmark, tt-inference-server) read
loadtest's results. Read only from the typed result.

Where the definitions agree (docs/coming-from.md): output and total token throughput, request
throughput, TPOT ((last - first) / (n - 1)), ITL (every gap between tokens). Where they differ,
loadtest's own are written, the ones it stands by: TTFT and E2EL count from the intended send
(vLLM's from the actual one, so a late client hides in them), and the rates count what
happened inside the measured window. Percentile keys are vLLM's (``p99_ttft_ms``,
``p99.9_ttft_ms``); the per-request arrays (``ttfts``, ``itls``, ...) are left empty:
``requests.jsonl`` holds each request (``outputs.requests_jsonl``), and answers are never kept.
"""

from __future__ import annotations

from loadtest.core.json_types import JsonObject
from loadtest.results.model import LatencySummary, RunMetrics

FILE = "vllm-bench-serve.json"
# vLLM's metric names for loadtest's: time to first token, per output token, between tokens,
# end to end
METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}
PERCENTILES = {"p50": "50", "p90": "90", "p95": "95", "p99": "99", "p999": "99.9"}


def vllm_layout(m: RunMetrics) -> JsonObject:
    """``m`` as ``vllm bench serve --save-result`` writes its run."""
    t, r = m.throughput, m.requests
    backend = m.scenario.get("backend")
    model = backend.get("model") if isinstance(backend, dict) else None
    out: JsonObject = {
        "date": m.started_at,
        "backend": "loadtest",
        "model_id": model if isinstance(model, str) else None,
        "duration": t.window_s if t else None,
        "completed": r.completed,
        "failed": r.failed,
        "total_input_tokens": r.input_tokens,
        "total_output_tokens": r.output_tokens,
        "request_throughput": t.requests_per_s if t else None,
        "output_throughput": t.output_tokens_per_s if t else None,
        "total_token_throughput": t.total_tokens_per_s if t else None,
        "request_goodput": m.goodput.good_requests_per_s if m.goodput else None,
        "input_lens": [],
        "output_lens": [],
        "ttfts": [],
        "itls": [],
        "generated_texts": [],
        "errors": [],
    }
    for theirs, ours in METRICS.items():
        s = (m.latency_ms or {}).get(ours)
        out.update(_metric(theirs, s))
    return out


def _metric(name: str, s: LatencySummary | None) -> JsonObject:
    """``mean_X_ms``, ``median_X_ms``, ``std_X_ms`` and ``pP_X_ms`` of one metric."""
    if s is None or not s.count:
        return {}
    out: JsonObject = {
        f"mean_{name}_ms": s.mean,
        f"median_{name}_ms": s.p50,
        f"std_{name}_ms": s.stddev,
    }
    for field, word in PERCENTILES.items():
        out[f"p{word}_{name}_ms"] = getattr(s, field)
    return out
