"""Each finished request as an OpenTelemetry span, exported by OTLP off the event loop
(``outputs.otel``, ``--otel``; the ``otel`` extra).

A request's trace id is its correlation id (``core.request_ids``), sent in its ``traceparent``:
a server that traces (vLLM's ``--otlp-traces-endpoint``) makes its own span a child of this
one, in the same trace. The span runs from the intended send (latencies count from there) to
the end of the answer; the request's phases are its events (connected, sent, first byte, first
token, last token) and the client's waits its attributes, beside OpenTelemetry's GenAI
semantic conventions (``gen_ai.*``). On the loop a finished request is only appended to a
queue: a thread makes the spans and exports them, every ``EXPORT_EVERY_S``.

Where they go is OpenTelemetry's standard environment, read by its exporter:
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``), ``..._HEADERS``, ``..._TIMEOUT``,
``..._CERTIFICATE``, ``..._PROTOCOL`` (``http/protobuf``, the default, or ``grpc`` with
``opentelemetry-exporter-otlp-proto-grpc`` installed); ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` name the source.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from loadtest.config.scenario import Scenario
from loadtest.core import secrets
from loadtest.core._version import __version__
from loadtest.core.request_ids import RequestIds, sampled, span_id
from loadtest.execution.request import RequestState
from loadtest.transport.endpoint import Endpoint

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

OPERATION, REQUEST_MODEL = "gen_ai.operation.name", "gen_ai.request.model"  # GenAI's names
EXPORT_EVERY_S = 1.0
BATCH = 512  # spans an export at most
CLOSE_TIMEOUT_S = 15.0  # the last export's bound, at the end of a run
Attributes = Mapping[str, str | int | float | bool]
EXTRA_HINT = "pip install 'loadtest[otel]'"


SAMPLERS = ("always_on", "always_off", "traceidratio")  # and each parentbased_ (a root's own)


def sample_ratio() -> float:
    """The share of requests traced, from OpenTelemetry's standard OTEL_TRACES_SAMPLER (and
    OTEL_TRACES_SAMPLER_ARG for a ratio); every request by default. ValueError: a sampler
    this client does not apply (a request span is a root: ``parentbased_X`` is ``X``)."""
    name = (os.getenv("OTEL_TRACES_SAMPLER") or "always_on").strip().lower()
    base = name.removeprefix("parentbased_")
    if base not in SAMPLERS:
        raise ValueError(
            f"OTEL_TRACES_SAMPLER={name!r}: loadtest samples requests by "
            + ", ".join(SAMPLERS)
            + " (or their parentbased_ forms)"
        )
    if base != "traceidratio":
        return 1.0 if base == "always_on" else 0.0
    arg = os.getenv("OTEL_TRACES_SAMPLER_ARG", "1.0")
    try:
        ratio = float(arg)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"OTEL_TRACES_SAMPLER_ARG={arg!r}: a share of the requests, 0 to 1")
    return ratio


def protocol() -> str:
    """The OTLP protocol the environment asks for (http/protobuf by default)."""
    return (
        os.getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()


def traces_url() -> str:
    """Where the spans go, as the exporter reads the environment (for messages)."""
    url = os.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not url:
        base = os.getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
        if protocol() == "grpc":
            url = base or "http://localhost:4317"
        else:
            url = (base or "http://localhost:4318").rstrip("/") + "/v1/traces"
    return secrets.redact_url(url)


def resource() -> Resource:
    """The source the spans name: ``service.name`` loadtest, unless the environment
    (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``) names another."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    found = Resource.create({"service.version": __version__})
    if str(found.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        found = found.merge(Resource({SERVICE_NAME: "loadtest"}))
    return found


def span_exporter() -> SpanExporter:
    """The OTLP span exporter the environment configures. ImportError: the extra (or the
    gRPC exporter) is missing; ValueError: a protocol OpenTelemetry's Python SDK lacks."""
    kind = protocol()
    try:
        if kind == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )
        elif kind == "grpc":
            try:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[no-redef]
                    OTLPSpanExporter,
                )
            except ImportError as exc:
                raise ImportError(
                    "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs OpenTelemetry's gRPC exporter: "
                    "pip install opentelemetry-exporter-otlp-proto-grpc"
                ) from exc
        else:
            raise ValueError(
                f"OTEL_EXPORTER_OTLP_PROTOCOL={kind!r}: loadtest exports http/protobuf or grpc"
            )
    except ImportError as exc:
        if "grpc" in str(exc) and kind == "grpc":
            raise
        raise ImportError(f"outputs.otel needs OpenTelemetry's SDK: {EXTRA_HINT}") from exc
    return OTLPSpanExporter()


class SpanExport:
    """The spans of a process's requests: ``point(attributes)`` gives the hook a point's
    recorder calls with each finished request; ``close()`` exports the last and stops."""

    def __init__(
        self,
        now_ns: Callable[[], int],
        exporter: SpanExporter | None = None,
        ratio: float | None = None,
    ) -> None:
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.ratio = sample_ratio() if ratio is None else ratio  # of the requests, traced
        self._exporter = exporter if exporter is not None else span_exporter()
        self._resource = resource()
        self._scope = InstrumentationScope("loadtest", __version__)
        # the run's clock (CLOCK_MONOTONIC) to Unix time, as OTLP stamps are
        self._to_unix = time.time_ns() - now_ns()
        self._queue: deque[tuple[RequestState, Attributes]] = deque()
        self._ids = RequestIds("", False)  # ids for requests that carried none
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loadtest-otel", daemon=True)
        self._thread.start()
        self.exported = self.failed = 0

    def point(self, attributes: Attributes) -> Callable[[RequestState], None]:
        """The hook for one point's finished requests, its spans carrying ``attributes``."""
        append, ratio = self._queue.append, self.ratio

        def finished(st: RequestState) -> None:
            if ratio >= 1.0 or sampled(st.request_id or self._ids.next()[0], ratio):
                append((st, attributes))

        return finished

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> str:
        """Export what is left (within ``timeout_s``) and stop; a line saying what went where."""
        self._stop.set()
        self._thread.join(timeout_s)
        left = len(self._queue)
        self.failed += left
        try:
            self._exporter.shutdown()
        except Exception:  # an exporter's own failure to stop: the spans are counted
            pass
        line = f"OpenTelemetry: {self.exported} request spans exported to {traces_url()}"
        return line + (
            f", {self.failed} not (the collector refused or was not there)" if self.failed else ""
        )

    # -- the export thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(EXPORT_EVERY_S):
            self._export()
        self._export()

    def _export(self) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        queue = self._queue
        while queue:
            batch: list[ReadableSpan] = []
            while queue and len(batch) < BATCH:
                batch.append(self._span(*queue.popleft()))
            try:
                ok = self._exporter.export(batch) == SpanExportResult.SUCCESS
            except Exception:  # the exporter logs why; the spans are counted as not sent
                ok = False
            if ok:
                self.exported += len(batch)
            else:
                self.failed += len(batch)

    def _span(self, st: RequestState, attributes: Attributes) -> ReadableSpan:
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        rid = st.request_id or self._ids.next()[0]  # never sent (or no header): its own trace
        context = SpanContext(
            int(rid, 16), int(span_id(rid), 16), False, TraceFlags(TraceFlags.SAMPLED)
        )
        unix = self._to_unix
        attrs = {**attributes, **request_attributes(st)}
        model = st.req.model or str(attributes.get(REQUEST_MODEL, ""))
        attrs[REQUEST_MODEL] = model
        events = [
            Event(name, {}, t + unix) for name, t in phases(st) if t
        ]  # fmt: skip
        status = Status(StatusCode.ERROR, st.error) if st.error else Status(StatusCode.UNSET)
        operation = attributes.get(OPERATION, "request")
        return ReadableSpan(
            f"{operation} {model}".strip(),
            context=context,
            resource=self._resource,
            attributes=attrs,
            events=events,
            kind=SpanKind.CLIENT,
            status=status,
            start_time=st.intended_ns + unix,
            end_time=(st.done_ns or st.intended_ns) + unix,
            instrumentation_scope=self._scope,
        )


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
