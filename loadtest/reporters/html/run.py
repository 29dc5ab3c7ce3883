"""``report.html``: one run's page."""

from __future__ import annotations

from pathlib import Path

from loadtest.core import atomic
from loadtest.reporters import insight, plots
from loadtest.reporters.html.page import card, esc, num, page, pairs, svg, table

LAT_ROWS = ("ttft", "ttft_service", "itl", "tpot", "e2e", "e2e_service", "queue", "dispatch_lag")


LAT_COLS = ("count", "mean", "p50", "p90", "p95", "p99", "p999", "max")


def run_strip(m: dict) -> list[str]:
    """The verdict strip: SLA, validity, stability, then the headline figures."""
    cards = []
    sla = m.get("sla")
    if sla:
        failing = [c["name"] for c in sla["checks"] if c["verdict"] != "PASS"]
        cards.append(
            card(
                "SLA",
                sla["verdict"],
                sla["verdict"],
                f"{len(sla['checks'])} checks"
                + (f"; not passed: {', '.join(failing)}" if failing else ""),
            )
        )
    else:
        cards.append(card("SLA", "none", "", "no sla: block in the scenario"))
    v = m.get("validity") or {}
    reasons = v.get("reasons") or []
    cards.append(
        card(
            "validity",
            "valid" if v.get("valid") else "invalid",
            "good" if v.get("valid") else "bad",
            reasons[0] if reasons else f"{len(v.get('warnings') or [])} warnings",
        )
    )
    st = m.get("stability")
    if st:
        sub = (
            f"delivered {st['delivered_rps']:.4g} of {st['offered_rps']:.4g} req/s offered"
            if st.get("offered_rps")
            else ""
        )
        cards.append(
            card(
                "stability",
                "steady" if st["steady"] else "overloaded",
                "good" if st["steady"] else "bad",
                sub,
            )
        )
    if not m.get("latency_ms"):
        return cards
    t, lat, r = m["throughput"], m["latency_ms"], m["requests"]
    cards.append(
        card("output tok/s", num(t["output_tokens_per_s"]), "", f"over {t['window_s']:g} s")
    )
    cards.append(card("requests/s", num(t["requests_per_s"])))
    for key, label in (("ttft", "TTFT p99"), ("itl", "ITL p99"), ("e2e", "E2E p99")):
        p = (lat.get(key) or {}).get("p99")
        cards.append(
            card(label, num(p, " ms"), "", f"p50 {num((lat.get(key) or {}).get('p50'), ' ms')}")
        )
    g = m.get("goodput")
    if g and g.get("good_requests_per_s") is not None:
        cards.append(
            card(
                "goodput",
                f"{num(g['good_requests_per_s'])}/s",
                "",
                f"attainment {g['attainment']:.1%}",
            )
        )
    total = r["completed"] + r["failed"]
    cards.append(
        card("failed", str(r["failed"]), "bad" if r["failed"] else "", f"of {total} measured")
    )
    return cards


def run_html(m: dict) -> str:
    """report.html's text from a saved metrics.json."""
    backend = m.get("backend") or {}
    header = (
        f"<h1>{esc(m['name'])}</h1><p class=meta>status <b class='{esc(m['status'])}'>{esc(m['status'])}</b>"
        f" · started {esc(m.get('started_at'))} · backend {esc(backend.get('name') or backend.get('kind'))}"
        f" · scenario {esc(m.get('scenario_file'))}</p>"
    )
    return page(m["name"], header, run_strip(m), run_sections(m))


def run_sections(m: dict) -> list[tuple[str, str, str]]:
    """The run report's sections: (id, title, html)."""
    summary = []
    if m.get("sla"):
        summary.append(sla_html(m["sla"]))
    v = m.get("validity", {})
    items = [f"<li>{esc(x)}</li>" for x in v.get("reasons", []) + v.get("warnings", [])]
    summary.append(
        f"<h3>Validity: <span class='{'ok' if v.get('valid') else 'invalid'}'>"
        f"{'valid' if v.get('valid') else 'invalid'}</span></h3>"
        + (f"<ul>{''.join(items)}</ul>" if items else "")
    )
    rows = insight.stability_rows(m.get("stability"))
    if rows:
        summary.append("<h3>Stability</h3>" + pairs(rows))
    latency, over_time = "", ""
    if m.get("latency_ms"):
        t, d = m["throughput"], m["definitions"]
        summary.append(
            "<h3>Headline</h3>"
            + table(
                ("metric", "value", "definition"),
                [
                    (esc(label), esc(t[key]), f"<span class=def>{esc(d[key])}</span>")
                    for label, key in (
                        ("output tok/s", "output_tokens_per_s"),
                        ("total tok/s", "total_tokens_per_s"),
                        ("requests/s", "requests_per_s"),
                    )
                ]
                + [("window", esc(t["window_s"]) + " s", "")],
            )
        )
        r = m["requests"]
        summary.append(
            f"<p>{r['completed']} completed, {r['failed']} failed, {r['warmup']} warmup, "
            f"{r['cancelled']} cancelled; errors: {esc(r['errors_by_type'] or 'none')}</p>"
        )
        lat_rows: list = [
            [esc(k)] + [esc(m["latency_ms"][k].get(c)) for c in LAT_COLS] for k in LAT_ROWS
        ]
        latency = (
            svg(plots.percentile_plot([(m["name"], m["histograms"])]), "percentile plot")
            + "<h3>Latency (ms)</h3>"
            + table(("metric",) + LAT_COLS, lat_rows)
            + "<ul class=def>"
            + "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in d.items())
            + "</ul>"
        )
    ts = m.get("timeseries") or {}
    gpu = m.get("gpu") or {}
    over_time = svg(
        plots.timeseries_plot(
            ts.get("points", []),
            ts.get("interval_s", 1),
            m.get("window"),
            gpu.get("devices") if gpu.get("available") else None,
            (m.get("server") or {}).get("series"),
        ),
        "time series",
    )
    engine = []
    roof = insight.roofline_rows(m.get("roofline"))
    if roof:
        engine.append(plots.roofline_plot(m.get("roofline")) or "")
        engine.append("<h3>Roofline</h3>" + pairs(roof))
    rows = insight.gpu_rows(m.get("gpu"))
    if rows:
        engine.append("<h3>GPU telemetry</h3>" + pairs(rows))
    rows, ops = insight.profile_rows(m.get("profile"))
    if rows:
        engine.append("<h3>Profiler window</h3>" + pairs(rows))
    if ops:
        engine.append(
            table(
                ("operator", "calls", "self CUDA µs", "self CPU µs", "CPU µs (with children)"),
                [
                    tuple(
                        esc(o[k])
                        for k in (
                            "name",
                            "calls",
                            "self_cuda_time_us",
                            "self_cpu_time_us",
                            "cpu_time_us",
                        )
                    )
                    for o in ops
                ],
            )
        )
    traffic = [
        f"<h3>{esc(title)}</h3>" + pairs(rows)
        for title, rows in (
            ("Goodput", insight.goodput_rows(m.get("goodput"))),
            ("Sessions", insight.sessions_rows(m.get("sessions"))),
            ("Server", insight.server_rows(m.get("server"))),
            ("Client workers", insight.workers_rows(m.get("workers"), m.get("backend"))),
        )
        if rows
    ]
    env = m.get("environment") or {}
    return [
        ("summary", "Summary", "".join(summary)),
        ("latency", "Latency", latency),
        ("time", "Over time", over_time if ts.get("points") or gpu.get("available") else ""),
        ("engine", "GPU & roofline", "".join(engine)),
        ("traffic", "Goodput, sessions, server, workers", "".join(traffic)),
        (
            "env",
            "Environment",
            table(("key", "value"), [(esc(k), esc(v)) for k, v in env.items()]),
        ),
    ]


def sla_html(sla: dict) -> str:
    """The SLA verdict and checks as an HTML table."""
    rows = [
        (
            esc(c["name"]),
            f"<span class='{esc(c['verdict'])}'>{esc(c['verdict'])}</span>",
            esc(c["observed"]),
            esc(f"{c['op']} {c['bound']:g} {c['unit']}"),
            esc(c["reason"]),
        )
        for c in sla["checks"]
    ]
    return (
        f"<h3>SLA: <span class='{esc(sla['verdict'])}'>{esc(sla['verdict'])}</span></h3>"
        + table(("check", "verdict", "observed", "bound", "evidence"), rows)
    )


# -- sweep report --------------------------------------------------------------------------


def write_run(metrics: dict, run_dir: Path) -> Path:
    """Write report.html into the run directory; returns its path."""
    path = Path(run_dir) / "report.html"
    atomic.write_text(path, run_html(metrics))
    return path
