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
BATCH = 128  # spans an export at most (a send to the exporter's process: a short pickle)
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


# a span as plain values, made on the run's side and sent to the exporter's process: its trace
# id (hex), name, attributes, events (name, Unix ns), start and end (Unix ns), and error type
SpanRecord = tuple[
    str, str, dict[str, str | int | float | bool], list[tuple[str, int]], int, int, str | None
]


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
        self._sink: _InThread | _ExportProcess
        if exporter is None:
            span_exporter().shutdown()  # the extra and the protocol judged here, where it is told
            self._sink = _ExportProcess()
        else:
            self._sink = _InThread(exporter)
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


def make_span(record: SpanRecord, resource: Resource, scope: object) -> ReadableSpan:
    """A record as OpenTelemetry's span: a CLIENT span, the root of its trace."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    rid, name, attrs, events, start, end, error = record
    context = SpanContext(
        int(rid, 16), int(span_id(rid), 16), False, TraceFlags(TraceFlags.SAMPLED)
    )
    return ReadableSpan(
        name,
        context=context,
        resource=resource,
        attributes=attrs,
        events=[Event(event, {}, t) for event, t in events],
        kind=SpanKind.CLIENT,
        status=Status(StatusCode.ERROR, error) if error else Status(StatusCode.UNSET),
        start_time=start,
        end_time=end,
        instrumentation_scope=scope,  # type: ignore[arg-type]
    )


class _InThread:
    """Spans made and exported by ``exporter`` in the records thread."""

    def __init__(self, exporter: SpanExporter) -> None:
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self._exporter = exporter
        self._resource, self._scope = resource(), InstrumentationScope("loadtest", __version__)
        self.exported = self.failed = 0

    def send(self, records: list[SpanRecord]) -> None:
        if _export(self._exporter, [make_span(r, self._resource, self._scope) for r in records]):
            self.exported += len(records)
        else:
            self.failed += len(records)

    def close(self, timeout_s: float) -> tuple[int, int]:
        try:
            self._exporter.shutdown()
        except Exception:  # an exporter's own failure to stop: the spans are counted
            pass
        return self.exported, self.failed


class _ExportProcess:
    """A process of its own that makes the spans and exports them (``export_main``), fed
    pickled records on its stdin, each with its length; an empty one ends it, and it answers
    its counts. A subprocess, not multiprocessing's: a client worker (a daemonic process)
    may not have children of multiprocessing's kind."""

    def __init__(self) -> None:
        import subprocess
        import sys

        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from loadtest.execution.traces import export_main; export_main()",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.sent = 0

    def send(self, records: list[SpanRecord]) -> None:
        import pickle

        data = pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(len(data).to_bytes(8, "big") + data)
            self._proc.stdin.flush()
            self.sent += len(records)
        except OSError:  # the process is gone: close() counts what it lost
            pass

    def close(self, timeout_s: float) -> tuple[int, int]:
        """The process's counts (exported, not), once it exported the last; what it was sent
        and did not report is counted as not exported."""
        import subprocess

        try:
            out, _ = self._proc.communicate((0).to_bytes(8, "big"), timeout=timeout_s)
            exported = int(out.split()[0])  # of what it was sent; the rest it did not
            return exported, self.sent - exported
        except (subprocess.TimeoutExpired, ValueError, OSError):
            self._proc.kill()
            self._proc.wait()
            return 0, self.sent


def export_main() -> None:
    """The exporter's process: records in (stdin), spans out, until an empty one; then its
    counts, exported and not, on stdout."""
    import pickle
    import signal
    import sys

    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's to handle, and to say
    exporter = span_exporter()
    found, scope = resource(), InstrumentationScope("loadtest", __version__)
    exported = failed = 0
    read = sys.stdin.buffer.read
    while True:
        head = read(8)
        size = int.from_bytes(head, "big") if len(head) == 8 else 0
        if not size:  # the end, or the run is gone
            break
        records = pickle.loads(read(size))
        if _export(exporter, [make_span(r, found, scope) for r in records]):
            exported += len(records)
        else:
            failed += len(records)
    exporter.shutdown()
    sys.stdout.write(f"{exported} {failed}\n")


def _export(exporter: SpanExporter, spans: list[ReadableSpan]) -> bool:
    from opentelemetry.sdk.trace.export import SpanExportResult

    try:
        return exporter.export(spans) == SpanExportResult.SUCCESS
    except Exception:  # the exporter logs why; the spans are counted as not sent
        return False


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
