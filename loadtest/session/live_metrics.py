"""A session's live metrics: the Prometheus endpoint (``reporters.live_metrics``) and the OTLP
pushes (``reporters.otlp_metrics``), each started by the first point that asks for it
(``outputs.metrics_port``, ``outputs.otel``), kept for the points after it (a sweep's, a
repeat's); both read the same points, each watched while it runs and kept with its final
figures and verdicts."""

from __future__ import annotations

import asyncio
import sys

from loadtest.config.scenario import Scenario
from loadtest.core.errors import OutputError
from loadtest.execution.live import LiveStats
from loadtest.execution.runner import RunOutcome
from loadtest.reporters.live_metrics import MetricsEndpoint
from loadtest.reporters.live_points import Labels, LivePoints, Polled
from loadtest.reporters.otlp_metrics import MetricsPush
from loadtest.results.model import RunMetrics


class SessionMetrics:
    """The endpoint and the pushes, once a point asks for them, and the point being measured."""

    def __init__(self) -> None:
        self.points = LivePoints()
        self.endpoint: MetricsEndpoint | None = None
        self.push: MetricsPush | None = None
        self.labels: Labels | None = None  # the point being measured
        self.limits: tuple[int, int] | None = None  # its client lag limits (dispatch, loop)

    def begin(self, scenario: Scenario, run: str, point: str) -> None:
        """Before a point starts: the endpoint or the pushes started if this is the first to
        ask for them (OutputError: they could not be), and the point's labels (its model named
        at ``watch``)."""
        outputs = scenario.outputs
        if outputs.metrics_port is None and not outputs.otel:
            self.labels = None
            return
        if outputs.otel and self.push is None:
            try:
                self.push = MetricsPush(self.points)
            except ImportError as exc:
                raise OutputError(str(exc)) from exc
        if outputs.metrics_port is not None and self.endpoint is None:
            endpoint = MetricsEndpoint(
                outputs.metrics_port,
                outputs.metrics_address,
                outputs.metrics_linger / 1e9,
                self.points,
            )
            try:
                url = endpoint.start()
            except ImportError as exc:
                raise OutputError(str(exc)) from exc
            except OSError as exc:
                where = f"{outputs.metrics_address}:{outputs.metrics_port}"
                raise OutputError(f"outputs.metrics_port: cannot serve on {where}: {exc}") from exc
            self.endpoint = endpoint
            sys.stderr.write(f"loadtest: live metrics at {url}\n")
        self.labels = (scenario.name, run, point, "")
        validity = scenario.load.validity
        self.limits = (validity.max_dispatch_lag_p99, validity.max_loop_lag_p99)

    @property
    def totals(self) -> bool:
        """Whether the point's workers should send their totals in their heartbeats."""
        return self.labels is not None

    def watch(self, source: Polled, model: str | None) -> None:
        if self.labels is not None:
            self.labels = (*self.labels[:3], model or "")
            self.points.watch(self.labels, source, self.limits)

    def done(self, outcome: RunOutcome | None, result: RunMetrics) -> None:
        """The point's final figures (its merged recorder's) and verdicts."""
        if self.labels is None:
            return
        rec = outcome.recorder if outcome is not None else None
        final = LiveStats(
            elapsed_s=0.0 if outcome is None else (outcome.end_ns - outcome.t0_ns) / 1e9,
            sent=0 if outcome is None else outcome.sent,
            completed=0 if rec is None else rec.completed + rec.warmup,
            failed=0 if rec is None else rec.failed,
            totals=None if rec is None else rec.totals(),
        )
        verdicts = {"valid": result.validity.valid}
        if result.stability is not None and result.stability.steady is not None:
            verdicts["steady"] = result.stability.steady  # unknown: no gauge, not a guess
        self.points.done(self.labels, final, verdicts)
        self.labels = None

    async def close(self) -> None:
        """The final figures pushed; the endpoint waits to be scraped once more, then stops."""
        if self.push is not None:
            push, self.push = self.push, None
            await asyncio.to_thread(push.close)
        if self.endpoint is not None:
            endpoint, self.endpoint = self.endpoint, None
            await endpoint.close()
