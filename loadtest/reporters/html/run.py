"""``report.html``: one run's page."""

from __future__ import annotations

from pathlib import Path

from loadtest.core import atomic
from loadtest.reporters import inside, insight, plots
from loadtest.reporters.html.page import card, esc, num, page, pairs, svg, table
from loadtest.reporters.sections import Part, RowSection, row_sections
from loadtest.results.model import RunMetrics, Validity, Verdict

LAT_COLS = ("count", "mean", "p50", "p90", "p95", "p99", "p999", "max")


def run_strip(m: RunMetrics) -> list[str]:
    """The verdict strip: SLA, validity, stability, then the headline figures."""
    cards = [_sla_card(m.sla), _validity_card(m.validity)]
    st = m.stability
    if st:
        sub = (
            f"delivered {st.delivered_rps:.4g} of {st.offered_rps:.4g} req/s offered"
            if st.offered_rps
            else ""
        )
        cards.append(
            card(
                "stability",
                {True: "steady", False: "overloaded", None: "unknown"}[st.steady],
                {True: "good", False: "bad", None: "warn"}[st.steady],
                sub,
            )
        )
    if not m.latency_ms or m.throughput is None:
        return cards
    t, lat, r = m.throughput, m.latency_ms, m.requests
    shown: tuple[tuple[str, str], ...] = (
        ("ttft", "TTFT p99"),
        ("itl", "ITL p99"),
        ("e2e", "E2E p99"),
    )
    over = "" if t.window_s is None else f"over {t.window_s:g} s"  # None: nothing measured
    if t.inputs_per_s is not None:  # no token stream: inputs a second, and the answer's latency
        unit = "documents/s" if m.api and m.api.name == "rerank" else "inputs/s"
        cards.append(card(unit, num(t.inputs_per_s), "", over))
        shown = (("e2e", "E2E p99"),)
    else:
        cards.append(card("output tok/s", num(t.output_tokens_per_s), "", over))
    cards.append(card("requests/s", num(t.requests_per_s)))
    for key, label in shown:
        s = lat.get(key)
        p50, p99 = (None, None) if s is None else (s.p50, s.p99)
        cards.append(card(label, num(p99, " ms"), "", f"p50 {num(p50, ' ms')}"))
    g = m.goodput
    if g and g.good_requests_per_s is not None:
        cards.append(
            card(
                "goodput",
                f"{num(g.good_requests_per_s)}/s",
                "",
                f"attainment {g.attainment:.1%}",
            )
        )
    total = r.completed + r.failed
    cards.append(card("failed", str(r.failed), "bad" if r.failed else "", f"of {total} measured"))
    return cards


def _sla_card(sla: Verdict | None) -> str:
    if not sla:
        return card("SLA", "none", "", "no sla: block in the scenario")
    failing = [c.name for c in sla.checks if c.verdict != "PASS"]
    sub = f"{len(sla.checks)} checks" + (f"; not passed: {', '.join(failing)}" if failing else "")
    if not failing and sla.reasons:  # a verdict its checks alone do not explain
        sub += f"; {sla.reasons[0]}"
    return card("SLA", sla.verdict, sla.verdict, sub)


def _validity_card(v: Validity) -> str:
    return card(
        "validity",
        "valid" if v.valid else "invalid",
        "good" if v.valid else "bad",
        v.reasons[0] if v.reasons else f"{len(v.warnings)} warnings",
    )


def run_html(m: RunMetrics) -> str:
    """report.html's text from a saved metrics.json."""
    backend = m.backend
    header = (
        f"<h1>{esc(m.name)}</h1><p class=meta>status <b class='{esc(m.status)}'>{esc(m.status)}</b>"
        f" · started {esc(m.started_at)} · backend {esc(backend.name or backend.kind)}"
        f" · scenario {esc(m.scenario_file)}</p>"
    )
    return page(m.name, header, run_strip(m), run_sections(m))


def run_sections(m: RunMetrics) -> list[tuple[str, str, str]]:
    """The run report's sections: (id, title, html)."""
    has_time = bool(m.timeseries and m.timeseries.points) or bool(m.gpu and m.gpu.available)
    sections = row_sections(m)
    return [
        ("summary", "Summary", _summary(m, sections)),
        ("latency", "Latency", _latency(m)),
        ("time", "Over time", _over_time(m) if has_time else ""),
        ("engine", "GPU & roofline", _engine(m, sections)),
        (
            "traffic",
            "Steps, API, goodput, cost, sessions, server, workers",
            _part(sections, "traffic"),
        ),
        (
            "env",
            "Environment",
            table(("key", "value"), [(esc(k), esc(v)) for k, v in m.environment.view().items()]),
        ),
    ]


def _part(sections: list[RowSection], part: Part) -> str:
    """The row sections of one part of the report, each titled."""
    return "".join(f"<h3>{esc(s.title)}</h3>" + pairs(s.rows) for s in sections if s.part == part)


def _summary(m: RunMetrics, sections: list[RowSection]) -> str:
    """The SLA, validity, stability and headline figures with their definitions."""
    out = []
    if m.sla:
        out.append(sla_html(m.sla))
    v = m.validity
    items = [f"<li>{esc(x)}</li>" for x in v.reasons + v.warnings]
    out.append(
        f"<h3>Validity: <span class='{'ok' if v.valid else 'invalid'}'>"
        f"{'valid' if v.valid else 'invalid'}</span></h3>"
        + (f"<ul>{''.join(items)}</ul>" if items else "")
    )
    out.append(_part(sections, "summary"))
    if m.latency_ms and m.throughput and m.definitions:
        t, d = m.throughput, m.definitions
        out.append(
            "<h3>Headline</h3>"
            + table(
                ("metric", "value", "definition"),
                [
                    (esc(label), esc(getattr(t, key)), f"<span class=def>{esc(d[key])}</span>")
                    for label, key in (
                        ("output tok/s", "output_tokens_per_s"),
                        ("total tok/s", "total_tokens_per_s"),
                        ("requests/s", "requests_per_s"),
                    )
                ]
                + [("window", esc(t.window_s) + " s", "")],
            )
        )
        r = m.requests
        out.append(
            f"<p>{esc(insight.requests_line(r))}; errors: {esc(r.errors_by_type or 'none')}</p>"
        )
    return "".join(out)


def _latency(m: RunMetrics) -> str:
    """The percentile plot and the latency table with its definitions."""
    if not m.latency_ms or not m.definitions:
        return ""
    rows: list[list[str]] = [
        [esc(k)] + [esc(getattr(m.latency_ms[k], c)) for c in LAT_COLS]
        for k in insight.latency_rows(m)
    ]
    return (
        svg(plots.percentile_plot([(m.name, m.histograms or {})]), "percentile plot")
        + "<h3>Latency (ms)</h3>"
        + table(("metric",) + LAT_COLS, rows)
        + "<ul class=def>"
        + "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in m.definitions.items())
        + "</ul>"
    )


def _over_time(m: RunMetrics) -> str:
    return svg(
        plots.timeseries_plot(
            m.timeseries.points if m.timeseries else [],
            m.timeseries.interval_s if m.timeseries else 1,
            m.window,
            m.gpu.devices if m.gpu and m.gpu.available else None,
            m.server.series if m.server else None,
        ),
        "time series",
    )


def _engine(m: RunMetrics, sections: list[RowSection]) -> str:
    """The roofline (its plot first), placement, GPU telemetry and the profiler window with its
    top operators."""
    out = []
    if any(s.title == "Roofline" for s in sections):
        out.append(plots.roofline_plot(m.roofline) or "")
    out.append(_part(sections, "engine"))
    rows, ops = inside.profile_rows(m.profile)
    if rows:
        out.append("<h3>Profiler window</h3>" + pairs(rows))
    if ops:
        out.append(
            table(
                ("operator", "calls", "self CUDA µs", "self CPU µs", "CPU µs (with children)"),
                [
                    tuple(
                        esc(v)
                        for v in (
                            o.name,
                            o.calls,
                            o.self_cuda_time_us,
                            o.self_cpu_time_us,
                            o.cpu_time_us,
                        )
                    )
                    for o in ops
                ],
            )
        )
    return "".join(out)


def sla_html(sla: Verdict) -> str:
    """The SLA verdict and checks as an HTML table."""
    rows = [
        (
            esc(c.name),
            f"<span class='{esc(c.verdict)}'>{esc(c.verdict)}</span>",
            *map(esc, insight.sla_cells(c)),
            esc(c.reason),
        )
        for c in sla.checks
    ]
    why = "".join(f"<li>{esc(r)}</li>" for r in sla.reasons)
    return (
        f"<h3>SLA: <span class='{esc(sla.verdict)}'>{esc(sla.verdict)}</span></h3>"
        + table(insight.SLA_COLUMNS, rows)
        + f"<p class='note'>{esc(insight.CLIENT_NOTE)}.</p>"
        + (f"<p>Why {esc(sla.verdict)}:</p><ul>{why}</ul>" if why else "")
    )


def write_run(metrics: RunMetrics, run_dir: Path) -> Path:
    """Write report.html into the run directory; returns its path."""
    path = Path(run_dir) / "report.html"
    atomic.write_text(path, run_html(metrics))
    return path
