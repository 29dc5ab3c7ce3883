"""``report.html``: one self-contained file (inline CSS, plots as data URIs, no network).

Every piece of text that could come from a user, a prompt or a dataset goes through ``esc``.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from loadtest.core import atomic
from loadtest.reporters import insight, plots

CSS = """body{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.2em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.PASS,.ok{color:#137333}.FAIL,.failed{color:#b3261e}
.INCONCLUSIVE,.invalid,.interrupted,.oom{color:#a15c00}img{max-width:100%}code{background:#f3f3f3;padding:0 3px}
.def{color:#555;font-size:12px}"""
LAT_ROWS = ("ttft", "ttft_service", "itl", "tpot", "e2e", "e2e_service", "queue", "dispatch_lag")
LAT_COLS = ("count", "mean", "p50", "p90", "p95", "p99", "p999", "max")


def esc(x) -> str:
    """HTML-escape any value's text."""
    return escape("-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x)))


def _table(headers, rows) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<style>{CSS}</style></head><body>{body}</body></html>\n"
    )


def _img(uri: str | None, alt: str) -> str:
    return f"<p><img alt='{esc(alt)}' src='{uri}'></p>" if uri else f"<p>({esc(alt)}: no data)</p>"


def run_html(m: dict) -> str:
    """report.html's text from a saved metrics.json (self-contained: plots inlined)."""
    parts = [
        f"<h1>{esc(m['name'])}</h1><p>status: <b class='{esc(m['status'])}'>{esc(m['status'])}</b> · "
        f"started {esc(m.get('started_at'))} · backend {esc((m.get('backend') or {}).get('name'))}</p>"
    ]
    if m.get("latency_ms"):
        t, d = m["throughput"], m["definitions"]
        parts.append(
            "<h2>Headline</h2>"
            + _table(
                ("metric", "value", "definition"),
                [
                    (
                        "output tok/s",
                        esc(t["output_tokens_per_s"]),
                        f"<span class=def>{esc(d['output_tokens_per_s'])}</span>",
                    ),
                    (
                        "total tok/s",
                        esc(t["total_tokens_per_s"]),
                        f"<span class=def>{esc(d['total_tokens_per_s'])}</span>",
                    ),
                    (
                        "requests/s",
                        esc(t["requests_per_s"]),
                        f"<span class=def>{esc(d['requests_per_s'])}</span>",
                    ),
                    ("window", esc(t["window_s"]) + " s", ""),
                ],
            )
        )
        rows: list = [
            [esc(r)] + [esc(m["latency_ms"][r].get(c)) for c in LAT_COLS] for r in LAT_ROWS
        ]
        parts.append("<h2>Latency (ms)</h2>" + _table(("metric",) + LAT_COLS, rows))
        parts.append(
            "<ul class=def>"
            + "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in d.items())
            + "</ul>"
        )
        parts.append(
            "<h2>Distribution</h2>"
            + _img(plots.percentile_plot(m["histograms"]), "percentile plot")
        )
        ts = m.get("timeseries") or {}
        parts.append(
            "<h2>Over time</h2>"
            + _img(
                plots.timeseries_plot(ts.get("points", []), ts.get("interval_s", 1)), "time series"
            )
        )
        r = m["requests"]
        parts.append(
            f"<h2>Requests</h2><p>{r['completed']} completed, {r['failed']} failed, {r['warmup']} warmup, "
            f"{r['cancelled']} cancelled; errors: {esc(r['errors_by_type'] or 'none')}</p>"
        )
    v = m.get("validity", {})
    items = [f"<li>{esc(x)}</li>" for x in v.get("reasons", []) + v.get("warnings", [])]
    parts.append(
        f"<h2>Validity</h2><p class='{'ok' if v.get('valid') else 'invalid'}'>{'valid' if v.get('valid') else 'invalid'}</p>"
        + (f"<ul>{''.join(items)}</ul>" if items else "")
    )
    if m.get("sla"):
        parts.append(sla_html(m["sla"]))
    gpu = m.get("gpu") or {}
    if gpu.get("available"):
        points = (m.get("timeseries") or {}).get("points", [])
        for d in gpu["devices"]:
            parts.append(
                f"<h2>GPU {esc(d['index'])}</h2>" + _img(plots.gpu_plot(d, points), "GPU over time")
            )
    for title, rows in (
        ("Stability", insight.stability_rows(m.get("stability"))),
        ("Goodput", insight.goodput_rows(m.get("goodput"))),
        ("Sessions", insight.sessions_rows(m.get("sessions"))),
        ("Server", insight.server_rows(m.get("server"))),
        ("GPU telemetry", insight.gpu_rows(m.get("gpu"))),
        ("Roofline", insight.roofline_rows(m.get("roofline"))),
    ):
        if rows:
            parts.append(
                f"<h2>{esc(title)}</h2>" + _table(("", ""), [(esc(k), esc(v)) for k, v in rows])
            )
    rows, ops = insight.profile_rows(m.get("profile"))
    if rows:
        parts.append(
            "<h2>Profiler window</h2>" + _table(("", ""), [(esc(k), esc(v)) for k, v in rows])
        )
    if ops:
        parts.append(
            _table(
                ("operator", "calls", "self CUDA µs", "self CPU µs", "CPU µs (with children)"),
                [
                    (
                        esc(o["name"]),
                        esc(o["calls"]),
                        esc(o["self_cuda_time_us"]),
                        esc(o["self_cpu_time_us"]),
                        esc(o["cpu_time_us"]),
                    )
                    for o in ops
                ],
            )
        )
    env = m.get("environment") or {}
    parts.append(
        "<h2>Environment</h2>"
        + _table(("key", "value"), [(esc(k), esc(v)) for k, v in env.items()])
    )
    return _page(m["name"], "".join(parts))


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
        f"<h2>SLA: <span class='{esc(sla['verdict'])}'>{esc(sla['verdict'])}</span></h2>"
        + _table(("check", "verdict", "observed", "bound", "evidence"), rows)
    )


def sweep_html(doc: dict) -> str:
    """sweep.html's text from a saved sweep.json."""
    axis = doc["axis"]
    parts = [
        f"<h1>Sweep over {esc(axis)}</h1><p>status: <b>{esc(doc['status'])}</b> · {esc(doc['scenario_file'])}</p>"
    ]
    if doc.get("max_rate"):
        mr = doc["max_rate"]
        parts.append(
            f"<h2>Highest rate meeting the SLA: {esc(mr['rate'])} req/s</h2><p>first failing: "
            f"{esc(mr['first_failing_rate'])} req/s; tolerance {esc(mr['tolerance'])}. {esc(mr['evidence'])}</p>"
        )
    cols = (
        "x",
        "status",
        "output_tokens_per_s",
        "requests_per_s",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "itl_p50_ms",
        "itl_p99_ms",
        "e2e_p99_ms",
    )
    rows = [
        [
            f"<span class='{esc(c['status'])}'>{esc(c.get(k))}</span>"
            if k == "status"
            else esc(c.get(k))
            for k in cols
        ]
        for c in doc["curve"]
    ]
    parts.append("<h2>Points</h2>" + _table(cols, rows))
    parts.append(
        f"<p>knee (highest throughput / p99 E2E, steady points only): <b>{esc(doc['knee'])}</b> · frontier: {esc(doc['frontier'])}</p>"
    )
    parts += [f"<p><b>caveat:</b> {esc(c)}</p>" for c in doc.get("knee_caveats") or []]
    reasons = [
        (esc(p["params"]), esc(p["status"]), esc(p["reason"]))
        for p in doc["points"]
        if p.get("reason")
    ]
    if reasons:
        parts.append("<h2>Marked points</h2>" + _table(("params", "status", "reason"), reasons))
    for name, uri in plots.sweep_plots(doc["curve"], axis, doc["knee"]):
        parts.append(f"<h2>{esc(name)}</h2>" + _img(uri, name))
    return _page(f"sweep {axis}", "".join(parts))


def write_run(metrics: dict, run_dir: Path) -> Path:
    """Write report.html into the run directory; returns its path."""
    path = Path(run_dir) / "report.html"
    atomic.write_text(path, run_html(metrics))
    return path
