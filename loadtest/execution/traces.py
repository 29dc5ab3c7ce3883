"""Each finished request as an OpenTelemetry span, exported by OTLP off the event loop
(``outputs.otel``, ``--otel``; the ``otel`` extra).

A request's trace id is its correlation id (``core.request_ids``), sent in its ``traceparent``:
a server that traces (vLLM's ``--otlp-traces-endpoint``) makes its own span a child of this
one, in the same trace. The span runs from the intended send (latencies count from there) to
the end of the answer; the request's phases are its events (connected, sent, first byte, first
token, last token) and the client's waits its attributes, beside OpenTelemetry's GenAI
semantic conventions (``gen_ai.*``). On the loop a finished request is only appended to a
queue, handed every ``EXPORT_EVERY_S`` to a process of its own that makes the spans and
exports them (``span_sinks``).

Where they go is OpenTelemetry's standard environment, read by its exporter:
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``), ``..._HEADERS``, ``..._TIMEOUT``,
``..._CERTIFICATE``, ``..._PROTOCOL`` (``http/protobuf``, the default, or ``grpc`` with
``opentelemetry-exporter-otlp-proto-grpc`` installed); ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` name the source.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from loadtest.config.scenario import Scenario
from loadtest.core.otlp import sample_ratio, span_exporter, traces_url
from loadtest.core.request_ids import RequestIds, sampled
from loadtest.execution.request import RequestState
from loadtest.execution.span_sinks import ExportProcess, InThread, SpanRecord
from loadtest.transport.endpoint import Endpoint

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

OPERATION, REQUEST_MODEL = "gen_ai.operation.name", "gen_ai.request.model"  # GenAI's names
EXPORT_EVERY_S = 1.0
BATCH = 128  # spans an export at most (a send to the exporter's process: a short pickle)
CLOSE_TIMEOUT_S = 15.0  # the last export's bound, at the end of a run
Attributes = Mapping[str, str | int | float | bool]


class SpanExport:
    """The spans of a process's requests: ``point(attributes)`` gives the hook a point's
    recorder calls with each finished request; ``close()`` exports the last and stops.

    OpenTelemetry's encoder takes about 0.1 ms of Python a span: in this process, a thread
    doing it held the interpreter's lock from the event loop (a dispatch lag p99 of 56 ms at
    1,000 req/s). So each finished request becomes a plain record on the loop (as it is
    recorded, clear of the sends), a thread here only hands them on, and a process of its own
    (``exporter`` None) makes the spans and exports them. Given an ``exporter``, it is used
    here, in the thread (the tests' in-memory one)."""

    def __init__(
        self,
        now_ns: Callable[[], int],
        exporter: SpanExporter | None = None,
        ratio: float | None = None,
    ) -> None:
        self.ratio = sample_ratio() if ratio is None else ratio  # of the requests, traced
        self._sink: InThread | ExportProcess
        if exporter is None:
            span_exporter().shutdown()  # the extra and the protocol judged here, where it is told
            self._sink = ExportProcess()
        else:
            self._sink = InThread(exporter)
        # the run's clock (CLOCK_MONOTONIC) to Unix time, as OTLP stamps are
        self._to_unix = time.time_ns() - now_ns()
        self._queue: deque[SpanRecord] = deque()
        self._ids = RequestIds("", False)  # ids for requests that carried none
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loadtest-otel", daemon=True)
        self._thread.start()
        self.exported = self.failed = 0

    def point(self, attributes: Attributes) -> Callable[[RequestState], None]:
        """The hook for one point's finished requests, its spans carrying ``attributes``."""
        append, ratio, record = self._queue.append, self.ratio, self._record

        def finished(st: RequestState) -> None:
            # made here, on the loop, where the recording backlog keeps clear of the sends
            # (~15 µs), rather than in the thread, where it contends for the interpreter
            if ratio >= 1.0 or sampled(st.request_id or self._ids.next()[0], ratio):
                append(record(st, attributes))

        return finished

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> str:
        """Export what is left (within ``timeout_s``) and stop; a line saying what went where."""
        deadline = time.monotonic() + timeout_s
        self._stop.set()
        self._thread.join(timeout_s)
        left = len(self._queue)
        self.exported, failed = self._sink.close(max(0.1, deadline - time.monotonic()))
        self.failed = failed + left
        line = f"OpenTelemetry: {self.exported} request spans exported to {traces_url()}"
        return line + (
            f", {self.failed} not (the collector refused or was not there)" if self.failed else ""
        )

    # -- the records thread --------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(EXPORT_EVERY_S):
            self._export()
        self._export()

    def _export(self) -> None:
        queue = self._queue
        while queue:
            batch = [queue.popleft() for _ in range(min(len(queue), BATCH))]
            self._sink.send(batch)

    def _record(self, st: RequestState, attributes: Attributes) -> SpanRecord:
        rid = st.request_id or self._ids.next()[0]  # never sent (or no header): its own trace
        unix = self._to_unix
        attrs = {**attributes, **request_attributes(st)}
        model = st.req.model or str(attributes.get(REQUEST_MODEL, ""))
        attrs[REQUEST_MODEL] = model
        events = [(name, t + unix) for name, t in phases(st) if t]
        name = f"{attributes.get(OPERATION, 'request')} {model}".strip()
        start = st.intended_ns + unix
        return rid, name, attrs, events, start, (st.done_ns or st.intended_ns) + unix, st.error


def phases(st: RequestState) -> list[tuple[str, int]]:
    """A request's phases in order, on the run's clock (0: not reached, or not seen)."""
    w = st.wire
    stamps = st.stamps
    return [
        ("connected", 0 if w is None else w.connected_ns),
        ("sent", st.sent_ns if w is not None else 0),
        ("admitted", st.admitted_ns or 0),
        ("first_byte", 0 if w is None else w.first_byte_ns),
        ("first_token", stamps[0] if stamps else 0),
        ("last_token", stamps[-1] if stamps else 0),
    ]


def request_attributes(st: RequestState) -> dict[str, str | int | float | bool]:
    """A request's span attributes: GenAI's usage and ids, and loadtest's figures (ms)."""
    out: dict[str, str | int | float | bool] = {
        "loadtest.request.index": st.req.index,
        "gen_ai.usage.input_tokens": st.input_tokens,
        "gen_ai.usage.output_tokens": st.token_count,
        "loadtest.dispatch_lag_ms": (st.sent_ns - (st.lag_from_ns or st.intended_ns)) / 1e6,
    }
    if st.req.output_tokens:
        out["gen_ai.request.max_tokens"] = st.req.output_tokens
    if st.response_id:
        out["gen_ai.response.id"] = st.response_id
    if st.stamps:
        out["loadtest.ttft_ms"] = (st.stamps[0] - st.intended_ns) / 1e6
    if st.done_ns is not None:
        out["loadtest.e2e_ms"] = (st.done_ns - st.intended_ns) / 1e6
    w = st.wire
    if w is not None:
        out["loadtest.pool_wait_ms"] = w.pool_ns / 1e6
        out["loadtest.connect_ms"] = w.connect_ns / 1e6
        out["loadtest.tls_ms"] = w.tls_ns / 1e6
    if st.error:
        out["error.type"] = st.error
    if st.req.warmup:
        out["loadtest.warmup"] = True
    if st.cancelled:
        out["loadtest.cancelled"] = True
    if st.req.session is not None:
        out["gen_ai.conversation.id"] = str(st.req.session)
        out["loadtest.turn"] = st.req.turn
    if st.endpoint:
        out["loadtest.endpoint"] = st.endpoint
    return out


def point_attributes(scenario: Scenario, **labels: str | int) -> dict[str, str | int]:
    """The attributes a point's spans share: what kind of call, to which model and server
    (GenAI conventions), and ``labels`` as ``loadtest.<name>`` (scenario, run, point, worker)."""
    spec = scenario.backend
    api = getattr(spec, "api", None)
    out: dict[str, str | int] = {
        OPERATION: OPERATIONS.get(api or "", api or "text_completion"),
        "gen_ai.provider.name": "openai" if spec.kind == "openai" else spec.kind,
        REQUEST_MODEL: str(getattr(spec, "model", "") or ""),
        "loadtest.scenario": scenario.name,
        **{f"loadtest.{name}": value for name, value in labels.items() if value != ""},
    }
    base_url = getattr(spec, "base_url", None)
    if base_url:
        try:
            endpoint = Endpoint.parse(base_url)
        except ValueError:
            return out
        if endpoint.scheme != "unix":
            out["server.address"], out["server.port"] = endpoint.host, endpoint.port
    return out


# an OpenAI-compatible API's name as GenAI's gen_ai.operation.name
OPERATIONS = {"chat": "chat", "completions": "text_completion", "embeddings": "embeddings"}
