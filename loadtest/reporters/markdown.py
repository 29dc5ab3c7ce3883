"""``report.md``: the headline numbers with their definitions, percentile tables, SLA verdict."""

from __future__ import annotations

from pathlib import Path

from loadtest.core import atomic
from loadtest.core.text import visible_tree
from loadtest.reporters import insight

ROWS = ("ttft", "ttft_service", "itl", "tpot", "e2e", "e2e_service", "queue", "dispatch_lag")
COLS = ("count", "mean", "p50", "p90", "p95", "p99", "p999", "max")


def _cell(x) -> str:
    return "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def _esc(text: str) -> str:
    """Escape Markdown table/HTML metacharacters in text that may come from prompts or users."""
    return (
        str(text)
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("|", "\\|")
        .replace("\n", " ")
    )


def render(m: dict) -> str:
    """report.md's text from a saved metrics.json."""
    m = visible_tree(m)  # outside text in it is shown, never obeyed
    lines = [
        f"# {_esc(m['name'])}",
        "",
        f"status: **{m['status']}**  started: {m.get('started_at', '-')}",
        "",
    ]
    if m.get("latency_ms"):
        t = m["throughput"]
        lines += [
            "## Headline",
            "",
            "| metric | value | definition |",
            "|---|---|---|",
            f"| output tokens/s | {_cell(t['output_tokens_per_s'])} | {m['definitions']['output_tokens_per_s']} |",
            f"| total tokens/s | {_cell(t['total_tokens_per_s'])} | {m['definitions']['total_tokens_per_s']} |",
            f"| requests/s | {_cell(t['requests_per_s'])} | {m['definitions']['requests_per_s']} |",
            "",
            "## Latency (ms)",
            "",
            "| metric | " + " | ".join(COLS) + " |",
            "|---" * (len(COLS) + 1) + "|",
        ]
        for r in ROWS:
            s = m["latency_ms"][r]
            lines.append(f"| {r} | " + " | ".join(_cell(s.get(c)) for c in COLS) + " |")
        lines += ["", "Definitions:", ""] + [f"- **{k}**: {v}" for k, v in m["definitions"].items()]
        r = m["requests"]
        lines += [
            "",
            "## Requests",
            "",
            f"{r['completed']} completed, {r['failed']} failed, {r['warmup']} warmup, "
            f"{r['cancelled']} cancelled; errors: {_esc(r['errors_by_type'] or 'none')}",
        ]
    v = m.get("validity", {})
    lines += ["", "## Validity", "", "valid" if v.get("valid") else "**invalid**"]
    lines += [f"- {_esc(x)}" for x in v.get("reasons", []) + v.get("warnings", [])]
    if m.get("sla"):
        lines += [
            "",
            f"## SLA: {m['sla']['verdict']}",
            "",
            "| check | verdict | observed | bound | evidence |",
            "|---|---|---|---|---|",
        ]
        for c in m["sla"]["checks"]:
            lines.append(
                f"| {c['name']} | {c['verdict']} | {_cell(c['observed'])} | {c['op']} {c['bound']} {c['unit']} "
                f"| {_esc(c['reason'])} |"
            )
    for title, rows in (
        ("Stability", insight.stability_rows(m.get("stability"))),
        ("Goodput", insight.goodput_rows(m.get("goodput"))),
        ("Sessions", insight.sessions_rows(m.get("sessions"))),
        ("Server", insight.server_rows(m.get("server"))),
        ("Client workers", insight.workers_rows(m.get("workers"), m.get("backend"))),
        ("GPU", insight.gpu_rows(m.get("gpu"))),
        ("Roofline", insight.roofline_rows(m.get("roofline"))),
    ):
        if rows:
            lines += ["", f"## {title}", "", "| | |", "|---|---|"] + [
                f"| {_esc(k)} | {_esc(v)} |" for k, v in rows
            ]
    rows, ops = insight.profile_rows(m.get("profile"))
    if rows:
        lines += ["", "## Profiler window", "", "| | |", "|---|---|"] + [
            f"| {_esc(k)} | {_esc(v)} |" for k, v in rows
        ]
    if ops:
        lines += ["", "| operator | calls | self CUDA µs | self CPU µs |", "|---|---|---|---|"]
        lines += [
            f"| {_esc(o['name'])} | {o['calls']} | {o['self_cuda_time_us']} | {o['self_cpu_time_us']} |"
            for o in ops
        ]
    env = m.get("environment", {})
    lines += ["", "## Environment", ""] + [f"- {k}: {_esc(v)}" for k, v in env.items()]
    return "\n".join(lines) + "\n"


def write(metrics: dict, run_dir: Path) -> Path:
    """Write report.md into the run directory; returns its path."""
    path = Path(run_dir) / "report.md"
    atomic.write_text(path, render(metrics))
    return path
