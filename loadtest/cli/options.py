"""Options that several commands take, declared once: the same flag means the same thing in
``run`` and ``sweep`` (and reads the same in their ``--help``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Out = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        envvar="LOADTEST_OUT",
        help="Where to write the result: exactly this directory (default: under reports/).",
    ),
]
# (list options default to None, not []: a command reads ``set_ or []``)
Set = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        envvar="LOADTEST_SET",
        help="Override a scenario field: dotted.key=value (repeatable).",
    ),
]
Workers = Annotated[
    int | None,
    typer.Option(
        "--workers",
        envvar="LOADTEST_WORKERS",
        min=1,
        help="Client processes sharing the load (load.workers): more than one process can send.",
    ),
]
Ray = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        help="Run the workers as actors on this Ray cluster (load.ray; 'local' starts one here).",
    ),
]
Overwrite = Annotated[
    bool,
    typer.Option(
        "--overwrite", help="Replace an earlier loadtest result in --out (never other files)."
    ),
]
Quiet = Annotated[
    bool,
    typer.Option("--quiet", "-q", envvar="LOADTEST_QUIET", help="No live progress display."),
]
MetricsPort = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        envvar="LOADTEST_METRICS_PORT",
        min=0,
        max=65535,
        help="Serve live Prometheus metrics on this port while it runs (outputs.metrics_port; "
        "0: any free port; needs the prometheus extra).",
    ),
]
MetricsBind = Annotated[
    str | None,
    typer.Option(
        "--metrics-bind",
        envvar="LOADTEST_METRICS_BIND",
        metavar="ADDRESS",
        help="The address the live metrics listen on (outputs.metrics_address; default "
        "127.0.0.1, loopback only; 0.0.0.0: every interface, for a Prometheus elsewhere).",
    ),
]
Otel = Annotated[
    bool,
    typer.Option(
        "--otel",
        help="Export each request as an OpenTelemetry span and send its traceparent "
        "(outputs.otel; OTEL_EXPORTER_OTLP_* say where; needs the otel extra).",
    ),
]
Metric = Annotated[
    list[str] | None,
    typer.Option(
        "--metric",
        help="A metric to compare (repeatable; default: ttft/itl/e2e p50 and p99, and "
        "output_tokens_per_s where the server set it: a closed loop, a burst).",
    ),
]
MinEffect = Annotated[
    float,
    typer.Option(
        "--min-effect",
        envvar="LOADTEST_MIN_EFFECT",
        min=0.0,
        help="The smallest regression that fails, as a fraction (0.05: 5%).",
    ),
]
Confidence = Annotated[
    float,
    typer.Option(
        "--confidence",
        min=0.5,
        max=0.9999,
        help="Regression: 1 - the chance that an A/A comparison fails any check; compare: of "
        "the intervals, simultaneous over the metrics.",
    ),
]


def workers_override(
    workers: int | None,
    ray: str | None = None,
    metrics_port: int | None = None,
    otel: bool = False,
    metrics_bind: str | None = None,
) -> list[str]:
    """``--workers``, ``--ray``, ``--metrics-port``, ``--metrics-bind`` and ``--otel`` as the
    scenario overrides they stand for."""
    out = [] if workers is None else [f"load.workers={workers}"]
    out += [] if metrics_port is None else [f"outputs.metrics_port={metrics_port}"]
    out += [] if metrics_bind is None else [f"outputs.metrics_address={metrics_bind}"]
    out += ["outputs.otel=true"] if otel else []
    return out + ([] if ray is None else [f"load.ray={ray}"])
