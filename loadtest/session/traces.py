"""A session's request spans (``execution.traces``): the exporter started by the first point
that asks for it (``outputs.otel``), each point's requests handed to it, the last exported when
the session closes."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from loadtest.config.scenario import Scenario
from loadtest.core import secrets
from loadtest.core.clock import Clock
from loadtest.core.errors import OutputError
from loadtest.core.otlp import traces_url
from loadtest.core.text import visible
from loadtest.execution.request import RequestState
from loadtest.execution.traces import SpanExport, point_attributes


class SessionTraces:
    """The span exporter, once a point asks for it, and the point being measured."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.export: SpanExport | None = None
        self._hook: Callable[[RequestState], None] | None = None
        self._local = False  # a point ran in this process (else its workers exported)

    def begin(self, scenario: Scenario, run: str, point: str) -> None:
        """Before a point starts: the exporter started if this is the first point to ask for
        one (OutputError: the extra is missing, or the environment names no protocol it has)."""
        if not scenario.outputs.otel:
            self._hook = None
            return
        if self.export is None:
            try:
                self.export = SpanExport(self.clock.now_ns)
            except (ImportError, ValueError) as exc:
                raise OutputError(str(exc)) from exc
        self._hook = self.export.point(point_attributes(scenario, run=run, point=point))

    @property
    def ratio(self) -> float:
        """The share of requests traced (OTEL_TRACES_SAMPLER), once the exporter started."""
        return 1.0 if self.export is None else self.export.ratio

    @property
    def hook(self) -> Callable[[RequestState], None] | None:
        """What the point's recorder calls with each finished request (None: not traced)."""
        self._local = self._local or self._hook is not None
        return self._hook

    async def close(self) -> None:
        """The last spans exported (bounded), and a line saying where they went."""
        if self.export is None:
            return
        export, self.export = self.export, None
        line = await asyncio.to_thread(export.close)
        if not self._local:  # every point ran in worker processes, each exporting its own
            line = f"OpenTelemetry: the workers exported their request spans to {traces_url()}"
        sys.stderr.write(f"loadtest: {visible(secrets.scrub(line))}\n")
