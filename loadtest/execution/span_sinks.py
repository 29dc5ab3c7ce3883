"""Where a run's span records go: a process of its own that makes OpenTelemetry spans of them
and exports them (``ExportProcess``, running ``export_main``), or, given an exporter, the
records thread itself (``InThread``: the tests' in-memory exporter)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadtest.core._version import __version__
from loadtest.core.otlp import resource, span_exporter
from loadtest.core.request_ids import span_id

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

# a span as plain values, made on the run's side and sent to the exporter's process: its trace
# id (hex), name, attributes, events (name, Unix ns), start and end (Unix ns), and error type
SpanRecord = tuple[
    str, str, dict[str, str | int | float | bool], list[tuple[str, int]], int, int, str | None
]


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


class InThread:
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


class ExportProcess:
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
                "from loadtest.execution.span_sinks import export_main; export_main()",
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
