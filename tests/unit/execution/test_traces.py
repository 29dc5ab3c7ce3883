"""Request ids and spans: each request's correlation id and traceparent, and the span made of
its stamps (hand-computed times, GenAI attributes), exported through OpenTelemetry's SDK."""

from __future__ import annotations

import re

import pytest

from loadtest.config.scenario import Scenario
from loadtest.core.events import Sent
from loadtest.core.request_ids import RequestIds, span_id
from loadtest.execution.request import RequestState
from loadtest.workload.requests import PlannedRequest

MS = 1_000_000


def test_each_request_gets_its_own_id_sent_in_its_header_and_traceparent():
    ids = RequestIds("X-Request-Id", traced=True)
    seen = set()
    for _ in range(1000):
        rid, head = ids.next()
        assert re.fullmatch(r"[0-9a-f]{32}", rid) and int(span_id(rid), 16) != 0
        assert head == (f"X-Request-Id: {rid}\r\ntraceparent: 00-{rid}-{rid[16:]}-01\r\n".encode())
        seen.add(rid)
    assert len(seen) == 1000
    assert RequestIds("", traced=True).next()[1].startswith(b"traceparent: 00-")
    rid, head = RequestIds("X-Correlation-Id", traced=False).next()
    assert head == f"X-Correlation-Id: {rid}\r\n".encode()
    assert not RequestIds("", traced=False).active


def _state() -> RequestState:
    """A request intended at 1 s, handed over 0.5 ms late, connected (a new TLS connection:
    2 ms, 1.5 of them the handshake) and sent at 1.003 s, its head at 1.010 s, tokens at 1.012,
    1.015 and 1.019 s, done then."""
    req = PlannedRequest(7, 1000 * MS, 32, 3, 1, None, False, True)
    st = RequestState(
        req, 1000 * MS, 1003 * MS, lag_from_ns=1000 * MS, handed_ns=1000 * MS + MS // 2
    )
    st.wire = Sent(1003 * MS, connect_ns=2 * MS, tls_ns=3 * MS // 2, connected_ns=1002 * MS + MS // 2,
                   first_byte_ns=1010 * MS, request_id="ab" * 16)  # fmt: skip
    st.request_id, st.response_id = "ab" * 16, "cmpl-1"
    st.stamps = [1012 * MS, 1015 * MS, 1019 * MS]
    st.done_ns, st.output_tokens = 1019 * MS, 3
    return st


def test_a_requests_span_has_its_phases_as_events_and_its_figures_as_attributes():
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind, StatusCode

    from loadtest.execution.traces import SpanExport, point_attributes

    scenario = Scenario.model_validate(
        {"name": "chat", "backend": {"kind": "openai", "base_url": "http://gpu-7:8000/v1",
                                     "model": "llama", "api": "chat"},
         "load": {"arrival": {"kind": "concurrency", "users": 1}, "requests": 1}}
    )  # fmt: skip
    memory = InMemorySpanExporter()
    export = SpanExport(lambda: 0, memory)  # the run's clock at 0 now: spans on Unix time
    export.point(point_attributes(scenario, run="r1", point="rate=2"))(_state())
    failed = _state()
    failed.error, failed.stamps, failed.done_ns = "http_500", [], 1010 * MS
    export.point(point_attributes(scenario, run="r1", point="rate=2"))(failed)
    line = export.close()
    assert "2 request spans exported" in line and "not" not in line
    span, bad = memory.get_finished_spans()
    unix0 = span.start_time - 1000 * MS  # the offset of the run's clock to Unix time
    assert (span.end_time - span.start_time) == 19 * MS
    assert f"{span.context.trace_id:032x}" == "ab" * 16
    assert f"{span.context.span_id:016x}" == "ab" * 8 and span.parent is None
    assert span.name == "chat llama" and span.kind is SpanKind.CLIENT
    assert [(e.name, (e.timestamp - unix0) / MS) for e in span.events] == [
        ("connected", 1002.5), ("sent", 1003.0), ("first_byte", 1010.0),
        ("first_token", 1012.0), ("last_token", 1019.0),
    ]  # fmt: skip
    a = dict(span.attributes)
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "llama"
    assert (a["server.address"], a["server.port"]) == ("gpu-7", 8000)
    assert (a["loadtest.run"], a["loadtest.point"], a["loadtest.scenario"]) == (
        "r1",
        "rate=2",
        "chat",
    )
    assert (a["gen_ai.usage.output_tokens"], a["gen_ai.request.max_tokens"]) == (3, 3)
    assert a["gen_ai.response.id"] == "cmpl-1" and a["loadtest.request.index"] == 7
    assert (a["loadtest.ttft_ms"], a["loadtest.e2e_ms"], a["loadtest.dispatch_lag_ms"]) == (
        12.0,
        19.0,
        3.0,
    )
    assert (a["loadtest.connect_ms"], a["loadtest.tls_ms"]) == (2.0, 1.5)
    assert span.status.status_code is StatusCode.UNSET
    assert bad.status.status_code is StatusCode.ERROR and bad.attributes["error.type"] == "http_500"
    assert [e.name for e in bad.events] == ["connected", "sent", "first_byte"]
    assert dict(span.resource.attributes)["service.name"] == "loadtest"


def test_spans_the_collector_refuses_are_counted_not_lost_silently():
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from loadtest.execution.traces import SpanExport

    class Refusing(SpanExporter):
        def export(self, spans):
            return SpanExportResult.FAILURE

    export = SpanExport(lambda: 0, Refusing())
    hook = export.point({})
    for _ in range(3):
        hook(_state())
    assert export.close().endswith(", 3 not (the collector refused or was not there)")


def test_a_protocol_the_sdk_lacks_is_refused_by_name(monkeypatch):
    pytest.importorskip("opentelemetry.sdk")
    from loadtest.core.otlp import span_exporter, traces_url

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_PROTOCOL='http/json'"):
        span_exporter()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://user:pw@collector:4318/")
    assert traces_url() == "https://***@collector:4318/v1/traces"  # no credential shown


def test_a_sampled_share_of_requests_is_traced_by_opentelemetrys_ratio_rule(monkeypatch):
    """OTEL_TRACES_SAMPLER=traceidratio with 0.25: a request is traced when its id's low 64
    bits are under a quarter of 2**64 (TraceIdRatioBased's rule: the same requests a server
    sampling by it keeps), its traceparent flagged 01, the others 00 and no span."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

    from loadtest.core.otlp import sample_ratio
    from loadtest.core.request_ids import sampled
    from loadtest.execution.traces import SpanExport

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    assert sample_ratio() == 0.25
    under, over = "ab" * 8 + "3fffffffffffffff", "ab" * 8 + "4000000000000000"
    assert sampled(under, 0.25) and not sampled(over, 0.25)  # 2**62 is the bound
    sdk = TraceIdRatioBased(0.25)
    for rid in (under, over):
        decision = sdk.should_sample(None, int(rid, 16), "x").decision.is_sampled()
        assert decision == sampled(rid, 0.25)  # the SDK's own rule agrees
    ids = RequestIds("", traced=True, ratio=0.25)
    heads = [ids.next() for _ in range(4000)]
    flagged = [h.endswith(b"-01\r\n") for _, h in heads]
    assert all(f == sampled(rid, 0.25) for (rid, _), f in zip(heads, flagged))
    assert 0.2 < sum(flagged) / 4000 < 0.3
    memory = InMemorySpanExporter()
    export = SpanExport(lambda: 0, memory)
    hook = export.point({})
    for rid in (under, over):
        st = _state()
        st.request_id = rid
        hook(st)
    export.close()
    assert [f"{s.context.trace_id:032x}" for s in memory.get_finished_spans()] == [under]


@pytest.mark.parametrize(
    "sampler, arg, said",
    [("jaeger_remote", None, "OTEL_TRACES_SAMPLER='jaeger_remote'"),
     ("traceidratio", "1.5", "OTEL_TRACES_SAMPLER_ARG='1.5'"),
     ("traceidratio", "half", "OTEL_TRACES_SAMPLER_ARG='half'")],
)  # fmt: skip
def test_a_sampler_this_client_cannot_apply_is_refused_by_name(monkeypatch, sampler, arg, said):
    from loadtest.core.otlp import sample_ratio

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    if arg is not None:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    with pytest.raises(ValueError, match=re.escape(said)):
        sample_ratio()
