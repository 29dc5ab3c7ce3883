"""The end-of-run summary in the terminal (rich tables), from the typed result documents."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from loadtest.analysis.sla import overall
from loadtest.core.text import visible_doc
from loadtest.reporters import cost, inside, insight
from loadtest.reporters.console import make_console, styled
from loadtest.reporters.figures import change_pct, text4
from loadtest.reporters.placement import placement_rows
from loadtest.results.model import (
    LatencySummary,
    Regression,
    RegressionCheck,
    RepeatDoc,
    RunMetrics,
    Verdict,
)

ROWS = ("ttft", "ttft_service", "itl", "tpot", "e2e", "e2e_service", "queue", "dispatch_lag")
COLS = ("p50", "p90", "p95", "p99", "p999", "max")
VERDICT_STYLE = {"PASS": "green", "FAIL": "red", "INCONCLUSIVE": "yellow"}


def _ms(x: float | None) -> str:
    """A latency in at most 7 characters: 3 decimals under 10 ms, 1 under 10 s, whole above."""
    if x is None:
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}" if x < 10_000 else f"{x:.0f}"


def render(metrics: RunMetrics, console: Console | None = None, sla: bool = True) -> None:
    """A run's summary on the terminal: latency table, counts, throughput, harness health, SLA."""
    m = visible_doc(metrics)  # outside text in it is shown, never obeyed
    console = console or make_console()
    style = {"ok": "green", "invalid": "yellow", "interrupted": "yellow", "failed": "red"}.get(
        m.status, "white"
    )
    console.print(styled((str(m.name), "bold"), "  status: ", (m.status, style)))
    if not m.latency_ms or m.requests is None or m.throughput is None or m.harness is None:
        for reason in m.validity.reasons:
            console.print(f"  {reason}", style="red")
        return
    console.print(_latency_table(m.latency_ms, insight.latency_rows(m)))
    r, t = m.requests, m.throughput
    console.print(
        f"requests: {insight.requests_line(r)}"
        + (f"  errors: {r.errors_by_type}" if r.errors_by_type else "")
    )
    if t.window_s and t.inputs_per_s is not None:
        unit = "documents" if m.api and m.api.name == "rerank" else "inputs"
        console.print(
            f"throughput over {t.window_s:.3g} s window: {t.requests_per_s:.2f} req/s, "
            f"{t.inputs_per_s:.1f} {unit}/s, {t.input_tokens_per_s:.1f} input tok/s"
        )
    elif t.window_s:
        console.print(
            f"throughput over {t.window_s:.3g} s window: {t.output_tokens_per_s:.1f} output tok/s, "
            f"{t.total_tokens_per_s:.1f} total tok/s, {t.requests_per_s:.2f} req/s"
        )
    rows = insight.api_rows(m.api, None)[1:] + insight.steps_rows(m.steps)
    rows += insight.answers_rows(m.answers)
    for label, value in rows + insight.traffic_rows(m):
        console.print(f"{label}: {value}")
    _render_traffic(m, console)
    for label, value in placement_rows(m.backend, m.roofline):
        console.print(f"{label}: {value}")
    for line in inside.gpu_lines(m.gpu):
        console.print(line)
    loop, lag = m.harness.loop_lag_ms, m.latency_ms["dispatch_lag"]
    busy = m.harness.loop_busy
    console.print(
        f"harness: dispatch lag p99 {_ms(lag.p99)} ms, event-loop lag p99 {_ms(loop.p99)} ms"
        + ("" if busy is None else f", event loop busy {busy:.0%}")
    )
    workers = dict(insight.workers_rows(m.workers, m.backend))
    if workers:
        console.print(
            f"workers: {workers['workers']}; worst dispatch lag p99 {workers['worst dispatch lag p99']}"
        )
    for reason in m.validity.reasons:
        console.print(f"invalid: {reason}", style="yellow")
    for warning in m.validity.warnings:
        console.print(f"warning: {warning}", style="yellow")
    if sla:
        render_sla(m.sla, console)


def _latency_table(latency: dict[str, LatencySummary], rows: list[str]) -> Table:
    table = Table(title="latency (ms)", title_justify="left")
    table.add_column("metric", no_wrap=True, min_width=max(len(m) for m in ROWS))
    table.add_column("count", justify="right")
    for c in COLS:
        table.add_column(c, justify="right")
    for name in rows:
        s = latency[name]
        table.add_row(name, str(s.count), *(_ms(getattr(s, c)) for c in COLS))
    return table


def _render_traffic(m: RunMetrics, console: Console) -> None:
    """Goodput and sessions, where the run has them."""
    if m.goodput and m.goodput.attainment is not None:
        rows = dict(insight.goodput_rows(m.goodput))
        console.print(
            f"goodput: {rows['attainment']} met {rows['objectives (every one, per request)']}; {rows['goodput']}"
        )
    if m.cost:
        rows = dict(cost.cost_rows(m.cost))
        console.print(
            f"cost (estimate at {rows['estimate at']}): {rows['per million output tokens']} "
            f"per million output tokens, {rows['per request']} per request"
            + (
                f", {rows['per good request (goodput)']} per good request"
                if m.cost.usd_per_good_request is not None
                else ""
            )
        )
    if m.sessions:
        rows = dict(insight.sessions_rows(m.sessions))
        console.print(f"sessions: {rows['sessions']}")
        console.print(f"  TTFT first turn / later turns: {rows['TTFT first turn / later turns']}")


def render_sla(sla: Verdict | None, console: Console) -> None:
    """The SLA verdict and its checks as a table."""
    if not sla:
        return
    sla = visible_doc(sla)  # outside text in it is shown, never obeyed
    table = Table(
        title=f"SLA: {sla.verdict}",
        title_justify="left",
        title_style=VERDICT_STYLE[sla.verdict],
    )
    for col in ("check", "verdict", "observed", "bound", "evidence"):
        table.add_column(col, no_wrap=col == "verdict")
    for c in sla.checks:
        observed, free, bound = insight.sla_cells(c)
        if free not in (observed, "-"):  # 80 columns: the client-free figure under the observed
            observed += f"\n({free} off)"
        table.add_row(
            c.name, Text(c.verdict, style=VERDICT_STYLE[c.verdict]), observed, bound, c.reason
        )
    console.print(table)
    render_reasons(f"SLA {sla.verdict}", sla.reasons, console)


def render_reasons(title: str, reasons: list[str], console: Console) -> None:
    """What a verdict rests on, a line each, under its table."""
    for reason in reasons:
        console.print(f"{title}: {reason}", style="yellow", highlight=False)


def render_regression(reg: Regression | None, console: Console) -> None:
    """The regression checks against a baseline, when there are any."""
    if not reg:
        return
    reg = visible_doc(reg)  # outside text in it is shown, never obeyed
    worst = overall(c.verdict for c in reg.checks)
    table = Table(
        title=f"regression vs {', '.join(reg.baselines)}: {worst}  (minimum effect {reg.min_effect:.0%}, "
        f"{reg.confidence:.0%} simultaneous intervals, replicates {reg.replicates.baseline} vs "
        f"{reg.replicates.candidate})",
        title_justify="left",
        title_style=VERDICT_STYLE[worst],
    )
    for col in ("metric", "verdict", "baseline", "this run", "change", "interval"):
        table.add_column(
            col,
            justify="right" if col in ("baseline", "this run", "change", "interval") else "left",
        )
    for c in reg.checks:
        iv = c.change_interval_pct
        table.add_row(
            c.name,
            Text(c.verdict, style=VERDICT_STYLE[c.verdict]),
            text4(c.baseline),
            f"{text4(c.candidate)} {c.unit}",
            change_pct(c.change_pct),
            "-" if iv is None else f"{change_pct(iv[0])} .. {change_pct(iv[1])}",
        )
    console.print(table)


def render_repeat(doc: RepeatDoc, console: Console, sla: bool = True) -> None:
    """A replicate set: each headline metric's median and spread, and the pooled SLA verdict."""
    doc = visible_doc(doc)  # outside text in it is shown, never obeyed
    table = Table(
        title=f"{doc.name}: {len(doc.runs)} of {doc.repeats} replicates, status {doc.status} "
        f"(schedule seeds {', '.join(map(str, doc.schedule_seeds))})",
        title_justify="left",
    )
    for col in ("metric", "median", "min", "max", "spread"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for name, s in doc.summary.items():
        if s.n:
            table.add_row(
                name,
                text4(s.median),
                text4(s.min),
                text4(s.max),
                "-" if s.spread_pct is None else f"{s.spread_pct:.1f}%",
            )
    console.print(table)
    for reason in doc.reasons:
        console.print(reason, style="yellow")
    if sla:
        render_sla(doc.sla, console)


def render_compare(
    checks: list[RegressionCheck], a: str, b: str, confidence: float, console: Console
) -> None:
    """Two runs side by side: each metric, the change and its interval."""
    checks = visible_doc(checks)  # outside text in it is shown, never obeyed
    # the runs are named in full above the table, not in its headers: run names often share
    # a long prefix (a scenario and a date), and a narrow column would cut both to it
    console.print(styled(("A", "bold"), f" (reference): {a}"), overflow="fold")
    console.print(styled(("B", "bold"), f" (compared): {b}"), overflow="fold")
    table = Table(title="A -> B", title_justify="left")
    for col in ("metric", "A", "B", "change", f"{confidence:.0%} interval*", "significant"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for c in checks:
        iv = c.change_interval_pct
        sig: Text | str = (
            Text("yes", style="bold") if c.significant else "-" if c.significant is None else "no"
        )
        table.add_row(
            f"{c.name} ({c.unit})",
            text4(c.baseline),
            text4(c.candidate),
            change_pct(c.change_pct),
            "-" if iv is None else f"{change_pct(iv[0])} .. {change_pct(iv[1])}",
            sig,
        )
    console.print(table)
    console.print(
        f"* simultaneous over the {len(checks)} metrics (Bonferroni); block bootstrap within runs, "
        "plus the between-run spread when there are replicates"
    )
