"""The ``server`` section of ``metrics.json``, typed: the server's own ``/metrics`` over the
measured window, each metric by its common name (whatever the server calls it), per model,
engine or adapter where the server labels its series so, and its TTFT beside the client's."""

from __future__ import annotations

from typing import Literal, Protocol

from loadtest.core.document import Section

MetricKind = Literal["gauge", "ratio", "histogram", "counter"]


class ServerMetric(Section):
    """One common metric: a gauge's mean, max and last over the window; a ratio of counters
    (``window``) or a histogram's mean and count from their change across it; a counter's
    change over the whole run. Only the kind's own fields are there."""

    mean: float | None = None
    max: float | None = None
    last: float | None = None
    window: float | None = None
    window_mean: float | None = None
    window_count: float | None = None
    run_change: float | None = None

    @property
    def kind(self) -> MetricKind:
        given = self.model_fields_set
        if "window_mean" in given or "window_count" in given:
            return "histogram"
        if "run_change" in given:
            return "counter"
        if "window" in given:
            return "ratio"
        return "gauge"


ServerMetrics = dict[str, ServerMetric]  # common name -> its figures


class TtftCompared(Section):
    """The server's mean TTFT against the client's over the same requests."""

    server_mean_ms: float
    server_requests: int
    client_service_mean_ms: float
    client_requests: int
    difference_ms: float
    note: str


class ServerSection(Section):
    """``available: false`` with the reason, or the window's metrics (see ``ServerMetric``)."""

    available: bool
    source: str
    reason: str | None = None
    samples: int | None = None
    pages_cut: int | None = None
    sampled_s: list[float] | None = None  # the two samples the window's changes are between
    errors: int | None = None
    server_names: dict[str, str] | None = None  # common name -> the server's own
    units: dict[str, str] | None = None
    metrics: ServerMetrics | None = None
    series: dict[str, list[float | None]] | None = None  # t_s and each gauge, whole run
    by_model: dict[str, ServerMetrics] | None = None
    by_engine: dict[str, ServerMetrics] | None = None
    by_adapter: dict[str, ServerMetrics] | None = None
    ttft_compared: TtftCompared | None = None
    scope: str | None = None  # of several endpoints: whose this is
    endpoints: dict[str, ServerSection] | None = None  # each endpoint's own, by its API root

    def metric(self, name: str) -> ServerMetric | None:
        """A common metric over the window, where the server was read and has it."""
        return (self.metrics or {}).get(name) if self.available else None


# One page read: when (the run's clock, ns), and ``{metric name: value}``.
Sample = tuple[int, dict[str, float]]


class ServerSource(Protocol):
    """What reads a served model's own ``/metrics`` beside a run: one endpoint's sampler, or
    several endpoints' together."""

    @property
    def rows(self) -> list[Sample]: ...

    def start(self) -> None: ...

    def stop(self, final: bool = True) -> None: ...

    def csv_rows(self, t0_ns: int) -> list[dict[str, float | None]]:
        """server.csv's rows: seconds from t0 and each common gauge."""
        ...

    def summary(self, t0_ns: int, span: tuple[int, int] | None) -> ServerSection: ...
