"""The run report's titled sections of rows, in the order every format shows them: one list
(``row_sections``), so a section added is added to report.md and report.html alike. Each says
which part of the report it belongs to: the summary, the traffic and its facts, or the engine
(roofline, placement, GPU). The terminal shows a short form of its own (``terminal``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loadtest.reporters import cost, inside, insight
from loadtest.reporters.placement import placement_rows
from loadtest.results.model import RunMetrics

Part = Literal["summary", "traffic", "engine"]


@dataclass(frozen=True)
class RowSection:
    title: str
    rows: list[tuple[str, str]]
    part: Part


def row_sections(m: RunMetrics) -> list[RowSection]:
    """Every section of ``m`` that has rows, in report order."""
    sections = (
        RowSection("Stability", insight.stability_rows(m.stability), "summary"),
        RowSection("Steps", insight.steps_rows(m.steps), "traffic"),
        RowSection("Traffic", insight.traffic_rows(m), "traffic"),
        RowSection("API", insight.api_rows(m.api, m.throughput), "traffic"),
        RowSection("Answers", insight.answers_rows(m.answers), "summary"),
        RowSection("Goodput", insight.goodput_rows(m.goodput), "traffic"),
        RowSection("Cost (estimate)", cost.cost_rows(m.cost), "traffic"),
        RowSection("Sessions", insight.sessions_rows(m.sessions), "traffic"),
        RowSection("Server", inside.server_rows(m.server), "traffic"),
        RowSection("Client workers", insight.workers_rows(m.workers, m.backend), "traffic"),
        RowSection("Roofline", inside.roofline_rows(m.roofline), "engine"),
        RowSection("Placement", placement_rows(m.backend, m.roofline), "engine"),
        RowSection("GPU", inside.gpu_rows(m.gpu), "engine"),
    )
    return [s for s in sections if s.rows]
