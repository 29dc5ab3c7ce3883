"""Which API a scenario's backend speaks, and what each API can carry: the workload fields that
belong to some APIs only, and the figures an API with no token stream does not have."""

from __future__ import annotations

from loadtest.config.spec import Problem, Spec
from loadtest.config.workload import Workload

# APIs whose answer is one JSON document (no token stream): no TTFT, ITL or TPOT is claimed
POOLING_APIS = ("embeddings", "rerank")
# the latencies only a token stream has
STREAM_METRICS = ("ttft", "ttft_service", "ttft_answer", "itl", "tpot")
# workload field -> the APIs that carry it
API_FIELDS = {
    "inputs_per_request": ("embeddings",),
    "documents": ("rerank",),
    "tools": ("chat", "responses"),
    "response_format": ("chat", "responses"),
    "images": ("chat", "responses"),
    "audio": ("chat",),
}


def api_of(backend: Spec) -> str:
    """The backend's API (``generate`` for the simulator and noop: tokens, no API)."""
    return getattr(backend, "api", "generate")


def api_problems(
    api: str,
    workload: Workload,
    bounded: list[tuple[str, str]],
    goodput_on_stream: bool,
    streamed: bool = True,
) -> list[Problem]:
    """Workload fields ``api`` cannot carry (``inputs_per_request`` on chat), and objectives
    on figures it does not have (TTFT of an embeddings request, or of an answer not streamed):
    ``bounded`` the SLA's ``(field, metric)`` latency bounds, ``goodput_on_stream`` whether
    goodput bounds TTFT or TPOT."""
    problems: list[Problem] = [
        (("workload", field), f"{field} is for api: {' or '.join(apis)}, not {api} (backend.api)")
        for field, apis in API_FIELDS.items()
        if getattr(workload, field) is not None and api not in apis
    ]
    if api in POOLING_APIS:
        if workload.multi_turn is not None:
            problems.append(
                (("workload", "multi_turn"), f"api: {api} has no conversation to continue")
            )
        why = f"api: {api} streams no tokens"
    elif not streamed:
        why = "backend.stream: false: no token is stamped on its own"
    else:
        return problems
    problems += [
        (("sla", name), f"{why}: bound e2e or queue instead")
        for name, metric in bounded
        if metric in STREAM_METRICS
    ]
    if goodput_on_stream:
        problems.append((("goodput",), f"{why}: set goodput.e2e only"))
    return problems
