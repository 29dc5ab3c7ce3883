"""An OTLP/HTTP receiver for the tests: it takes what OpenTelemetry exporters POST to
``/v1/traces`` and ``/v1/metrics`` (protobuf, gzipped or not), decodes it with
``opentelemetry-proto``, and keeps the spans and metrics it was sent. Run as a script, it serves
until SIGTERM and keeps its counts in a file (``--tally``)."""

from __future__ import annotations

import argparse
import gzip
import json
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class OtlpReceiver:
    """``endpoint``: the base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``); ``spans()`` every span so
    far as ``(service name, span)``; ``metrics()`` every metric as ``(service name, metric)``."""

    def __init__(self, port: int = 0, tally: Path | None = None) -> None:
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        self._lock = threading.Lock()
        self._spans: list = []
        self._metrics: list = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    message = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    answer = trace_service_pb2.ExportTraceServiceResponse()
                    receiver._take_spans(message)
                elif self.path == "/v1/metrics":
                    message = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                    answer = metrics_service_pb2.ExportMetricsServiceResponse()
                    receiver._take_metrics(message)
                else:
                    self.send_error(404)
                    return
                if tally is not None:  # counts so far, for a script to read (written whole)
                    part = tally.with_suffix(".part")
                    part.write_text(json.dumps(receiver.counts()))
                    part.replace(tally)
                out = answer.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @staticmethod
    def _service(resource) -> str:
        for kv in resource.attributes:
            if kv.key == "service.name":
                return kv.value.string_value
        return ""

    def _take_spans(self, message) -> None:
        with self._lock:
            for rs in message.resource_spans:
                service = self._service(rs.resource)
                for ss in rs.scope_spans:
                    self._spans.extend((service, span) for span in ss.spans)

    def _take_metrics(self, message) -> None:
        with self._lock:
            for rm in message.resource_metrics:
                service = self._service(rm.resource)
                for sm in rm.scope_metrics:
                    self._metrics.extend((service, metric) for metric in sm.metrics)

    def counts(self) -> dict:
        """Spans by service name, and metrics, received so far."""
        with self._lock:
            services: dict[str, int] = {}
            for service, _ in self._spans:
                services[service] = services.get(service, 0) + 1
            return {"spans": services, "metrics": len(self._metrics)}

    def spans(self) -> list:
        with self._lock:
            return list(self._spans)

    def metrics(self) -> list:
        with self._lock:
            return list(self._metrics)

    def wait_for(self, found, timeout_s: float = 30.0):
        """Polls ``found()`` until it returns something true (returned), within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = found()
            if got or time.monotonic() > deadline:
                return got
            time.sleep(0.1)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def attributes(item) -> dict:
    """A span's (or event's, or data point's) attributes as a plain dict."""
    out = {}
    for kv in item.attributes:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None
    return out


if __name__ == "__main__":  # a receiver for a script (tools/check_installed.sh): until SIGTERM
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tally", type=Path, required=True, help="a JSON file of the counts so far")
    args = ap.parse_args()
    receiver = OtlpReceiver(args.port, args.tally)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    receiver.stop()
