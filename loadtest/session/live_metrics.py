"""A session's live metrics endpoint (``reporters.live_metrics``): started by the first point
that asks for one (``outputs.metrics_port``), kept for the points after it (a sweep's, a
repeat's), each point watched while it runs and kept with its final figures and verdicts."""

from __future__ import annotations

import sys

from loadtest.config.scenario import Scenario
from loadtest.core.errors import OutputError
from loadtest.execution.live import LiveStats
from loadtest.execution.runner import RunOutcome
from loadtest.reporters.live_metrics import MetricsEndpoint, Polled
from loadtest.results.model import RunMetrics

Labels = tuple[str, str, str, str]  # scenario, run, point, model


class SessionMetrics:
    """The endpoint, once a point asks for it, and the point being measured."""

    def __init__(self) -> None:
        self.endpoint: MetricsEndpoint | None = None
        self.labels: Labels | None = None  # the point being measured

    def begin(self, scenario: Scenario, run: str, point: str) -> None:
        """Before a point starts: the endpoint started if this is the first to ask for one
        (OutputError: it could not be), and the point's labels (its model named at ``watch``)."""
        outputs = scenario.outputs
        if outputs.metrics_port is None:
            self.labels = None
            return
        if self.endpoint is None:
            endpoint = MetricsEndpoint(
                outputs.metrics_port, outputs.metrics_address, outputs.metrics_linger / 1e9
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

    @property
    def totals(self) -> bool:
        """Whether the point's workers should send their totals in their heartbeats."""
        return self.endpoint is not None and self.labels is not None

    def watch(self, source: Polled, model: str | None) -> None:
        if self.endpoint is not None and self.labels is not None:
            self.labels = (*self.labels[:3], model or "")
            self.endpoint.watch(self.labels, source)

    def done(self, outcome: RunOutcome | None, result: RunMetrics) -> None:
        """The point's final figures (its merged recorder's) and verdicts."""
        if self.endpoint is None or self.labels is None:
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
        if result.stability is not None:
            verdicts["steady"] = result.stability.steady
        self.endpoint.done(self.labels, final, verdicts)
        self.labels = None

    async def close(self) -> None:
        if self.endpoint is not None:
            endpoint, self.endpoint = self.endpoint, None
            await endpoint.close()
