"""OpenTelemetry's standard environment, as loadtest reads it for its spans and metrics: the
sampler (``OTEL_TRACES_SAMPLER``), the protocol and endpoint (``OTEL_EXPORTER_OTLP_*``), the
source's name (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``) and the span exporter
they configure. OpenTelemetry is imported only when asked for (the ``otel`` extra)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from loadtest.core import secrets
from loadtest.core._version import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SpanExporter

EXTRA_HINT = "pip install 'llm-loadtest[otel]'"

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
