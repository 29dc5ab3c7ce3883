"""``report.md``: the headline numbers with their definitions, percentile tables, SLA verdict."""

from __future__ import annotations

from pathlib import Path

from loadtest.core import atomic
from loadtest.core.text import visible_doc
from loadtest.reporters import inside, insight
from loadtest.reporters.sections import row_sections
from loadtest.results.model import (
    LatencySummary,
    Requests,
    RunMetrics,
    Throughput,
    Verdict,
)

COLS = ("count", "mean", "p50", "p90", "p95", "p99", "p999", "max")


def _cell(x: object) -> str:
    return "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def _esc(text: object) -> str:
    """Escape Markdown table/HTML metacharacters in text that may come from prompts or users."""
    return (
        str(text)
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("|", "\\|")
        .replace("\n", " ")
    )


def render(metrics: RunMetrics) -> str:
    """report.md's text from a saved metrics.json."""
    m = visible_doc(metrics)  # outside text in it is shown, never obeyed
    lines = [f"# {_esc(m.name)}", "", f"status: **{m.status}**  started: {m.started_at}", ""]
    if m.latency_ms and m.throughput and m.definitions:
        lines += _headline(
            m.latency_ms, m.throughput, m.definitions, m.requests, insight.latency_rows(m)
        )
    v = m.validity
    lines += ["", "## Validity", "", "valid" if v.valid else "**invalid**"]
    lines += [f"- {_esc(x)}" for x in v.reasons + v.warnings]
    if m.sla:
        lines += _sla(m.sla)
    for section in row_sections(m):
        lines += ["", f"## {section.title}", "", "| | |", "|---|---|"] + _pairs(section.rows)
    rows, ops = inside.profile_rows(m.profile)
    if rows:
        lines += ["", "## Profiler window", "", "| | |", "|---|---|"] + _pairs(rows)
    if ops:
        lines += ["", "| operator | calls | self CUDA µs | self CPU µs |", "|---|---|---|---|"]
        lines += [
            f"| {_esc(o.name)} | {o.calls} | {o.self_cuda_time_us} | {o.self_cpu_time_us} |"
            for o in ops
        ]
    lines += ["", "## Environment", ""] + [
        f"- {k}: {_esc(v)}" for k, v in m.environment.view().items()
    ]
    return "\n".join(lines) + "\n"


def _headline(
    latency: dict[str, LatencySummary],
    t: Throughput,
    definitions: dict[str, str],
    r: Requests,
    rows: list[str],
) -> list[str]:
    lines = [
        "## Headline",
        "",
        "| metric | value | definition |",
        "|---|---|---|",
        f"| output tokens/s | {_cell(t.output_tokens_per_s)} | {definitions['output_tokens_per_s']} |",
        f"| total tokens/s | {_cell(t.total_tokens_per_s)} | {definitions['total_tokens_per_s']} |",
        f"| requests/s | {_cell(t.requests_per_s)} | {definitions['requests_per_s']} |",
        "",
        "## Latency (ms)",
        "",
        "| metric | " + " | ".join(COLS) + " |",
        "|---" * (len(COLS) + 1) + "|",
    ]
    for name in rows:
        s = latency[name]
        lines.append(f"| {name} | " + " | ".join(_cell(getattr(s, c)) for c in COLS) + " |")
    lines += ["", "Definitions:", ""] + [f"- **{k}**: {v}" for k, v in definitions.items()]
    return lines + [
        "",
        "## Requests",
        "",
        f"{_esc(insight.requests_line(r))}; errors: {_esc(r.errors_by_type or 'none')}",
    ]


def _sla(sla: Verdict) -> list[str]:
    lines = [
        "",
        f"## SLA: {sla.verdict}",
        "",
        "| " + " | ".join(insight.SLA_COLUMNS) + " |",
        "|" + "---|" * len(insight.SLA_COLUMNS),
    ]
    for c in sla.checks:
        cells = (c.name, c.verdict, *insight.sla_cells(c), c.reason)
        lines.append("| " + " | ".join(_esc(x) for x in cells) + " |")
    lines += ["", _esc(insight.CLIENT_NOTE) + "."]
    if sla.reasons:
        lines += ["", f"Why {sla.verdict}:", ""] + [f"- {_esc(r)}" for r in sla.reasons]
    return lines


def _pairs(rows: list[tuple[str, str]]) -> list[str]:
    return [f"| {_esc(k)} | {_esc(v)} |" for k, v in rows]


def write(metrics: RunMetrics, run_dir: Path) -> Path:
    """Write report.md into the run directory; returns its path."""
    path = Path(run_dir) / "report.md"
    atomic.write_text(path, render(metrics))
    return path
