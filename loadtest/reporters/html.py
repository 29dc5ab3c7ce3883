"""``report.html``, ``sweep.html`` and ``compare.html``: one self-contained file each (inline CSS,
inline SVG plots, a small inline script; nothing fetched).

The page is a verdict strip (the answer first), then sections. With JavaScript on, the sections
are tabs and the plots' markers show their exact values on hover; with it off, or printed, every
section is shown in order and the markers' SVG titles still give the values. Every piece of text
that could come from a user, a prompt, a server or a dataset goes through ``esc``.
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

from loadtest.core import atomic
from loadtest.reporters import insight, plots

CSS = """
:root{--ok:#137333;--bad:#b3261e;--warn:#a15c00;--muted:#5f6368;--line:#dadce0}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1120px;margin:0 auto;padding:1em 1.2em 3em;color:#202124}
h1{font-size:22px;margin:.3em 0 .1em}h2{font-size:17px;margin:1.4em 0 .4em}.meta{color:var(--muted);margin:0 0 .8em}
table{border-collapse:collapse;margin:.4em 0 1.2em;font-variant-numeric:tabular-nums}
td,th{border-bottom:1px solid var(--line);padding:3px 10px;text-align:left;vertical-align:top}
th{background:#f1f3f4;font-weight:600}td.n{text-align:right}
.strip{display:flex;flex-wrap:wrap;gap:8px;margin:.6em 0 1em}
.card{border:1px solid var(--line);border-radius:8px;padding:6px 12px;min-width:108px;background:#fff}
.card .k{font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:19px;font-weight:600}.card .s{font-size:11px;color:var(--muted);max-width:240px}
.card.PASS,.card.good{border-left:5px solid var(--ok)}.card.FAIL,.card.bad{border-left:5px solid var(--bad)}
.card.INCONCLUSIVE,.card.warn{border-left:5px solid var(--warn)}
.PASS,.ok,.good,.steady{color:var(--ok)}.FAIL,.failed,.bad,.invalid{color:var(--bad)}
.INCONCLUSIVE,.interrupted,.oom,.warn,.unsteady,.partial{color:var(--warn)}
nav.tabs{display:flex;flex-wrap:wrap;gap:2px;border-bottom:1px solid var(--line);margin:0 0 .6em}
nav.tabs a{padding:6px 14px;text-decoration:none;color:var(--muted);border:1px solid transparent;border-bottom:none;border-radius:6px 6px 0 0}
nav.tabs a.on{color:#202124;border-color:var(--line);background:#fff;margin-bottom:-1px}
body.js main>section{display:none}body.js main>section.on{display:block}
svg.plot{width:100%;max-width:980px;height:auto;display:block;margin:.4em 0 1em}.pt{cursor:crosshair}
.def{color:var(--muted);font-size:12px}code{background:#f1f3f4;padding:0 3px;border-radius:3px}
#tip{position:absolute;pointer-events:none;background:#202124;color:#fff;font-size:12px;padding:4px 8px;border-radius:4px;max-width:420px}
@media print{nav.tabs,#tip{display:none}main>section{display:block!important;break-inside:avoid-page}body{max-width:none}}
"""
# Tabs and tooltips; the page reads in full without it.
JS = """(function(){var d=document,secs=[].slice.call(d.querySelectorAll('main>section')),
links=[].slice.call(d.querySelectorAll('nav.tabs a'));if(!secs.length)return;d.body.classList.add('js');
function show(id){secs.forEach(function(s){s.classList.toggle('on',s.id===id)});
links.forEach(function(a){a.classList.toggle('on',a.getAttribute('href')==='#'+id)})}
links.forEach(function(a){a.addEventListener('click',function(e){e.preventDefault();
var id=a.getAttribute('href').slice(1);show(id);history.replaceState(null,'','#'+id)})});
var h=location.hash.slice(1);show(h&&d.getElementById(h)?h:secs[0].id);
var tip=d.getElementById('tip');[].forEach.call(d.querySelectorAll('svg .pt'),function(u){
var t=u.querySelector('title');if(t){u.setAttribute('data-tip',t.textContent);u.removeChild(t)}});
function at(e){return e.target&&e.target.getAttribute&&e.target.getAttribute('data-tip')}
d.addEventListener('mouseover',function(e){var v=at(e);if(v){tip.textContent=v;tip.hidden=false}});
d.addEventListener('mousemove',function(e){if(!tip.hidden){tip.style.left=(e.pageX+14)+'px';
tip.style.top=(e.pageY+14)+'px'}});d.addEventListener('mouseout',function(e){if(at(e))tip.hidden=true})})();"""
LAT_ROWS = ("ttft", "ttft_service", "itl", "tpot", "e2e", "e2e_service", "queue", "dispatch_lag")
LAT_COLS = ("count", "mean", "p50", "p90", "p95", "p99", "p999", "max")


def esc(x) -> str:
    """HTML-escape any value's text."""
    return escape("-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x)))


def _num(x, unit: str = "") -> str:
    if x is None:
        return "-"
    text = f"{x:.0f}" if abs(x) >= 1000 else f"{x:.4g}"
    return f"{text}{unit}"


NUMBER = re.compile(r"[-+]?[\d.,]+(e[-+]?\d+)?%?( ?(ms|s|µs|req/s|/s))?|-")


def _cell(c: str) -> str:
    """A cell, right-aligned when it holds a figure (text reads better left-aligned)."""
    plain = re.sub(r"<[^>]+>", "", c)
    return f"<td class=n>{c}</td>" if NUMBER.fullmatch(plain) else f"<td>{c}</td>"


def _table(headers, rows) -> str:
    head = "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>" if headers else ""
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _pairs(rows) -> str:
    return _table(None, [(esc(k), esc(v)) for k, v in rows])


def _card(label: str, value: str, cls: str = "", sub: str = "") -> str:
    """A verdict strip card; every argument is plain text (escaped here)."""
    return (
        f"<div class='card {esc(cls)}'><div class=k>{esc(label)}</div><div class=v>{esc(value)}</div>"
        + (f"<div class=s>{esc(sub)}</div>" if sub else "")
        + "</div>"
    )


def _page(title: str, header: str, strip: list[str], sections: list[tuple[str, str, str]]) -> str:
    """The document: header, verdict strip, tabs over the non-empty sections (id, title, body)."""
    sections = [s for s in sections if s[2]]
    nav = "".join(f"<a href='#{sid}'>{esc(name)}</a>" for sid, name, _ in sections)
    main = "".join(
        f"<section id='{sid}'><h2>{esc(name)}</h2>{body}</section>" for sid, name, body in sections
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"<header>{header}</header><div class='strip'>{''.join(strip)}</div>"
        f"<nav class='tabs'>{nav}</nav><main>{main}</main><div id='tip' hidden></div>"
        f"<script>{JS}</script></body></html>\n"
    )


def _svg(svg: str | None, what: str) -> str:
    return svg or f"<p class=def>({esc(what)}: no data)</p>"


# -- run report ----------------------------------------------------------------------------


def run_strip(m: dict) -> list[str]:
    """The verdict strip: SLA, validity, stability, then the headline figures."""
    cards = []
    sla = m.get("sla")
    if sla:
        failing = [c["name"] for c in sla["checks"] if c["verdict"] != "PASS"]
        cards.append(
            _card(
                "SLA",
                sla["verdict"],
                sla["verdict"],
                f"{len(sla['checks'])} checks"
                + (f"; not passed: {', '.join(failing)}" if failing else ""),
            )
        )
    else:
        cards.append(_card("SLA", "none", "", "no sla: block in the scenario"))
    v = m.get("validity") or {}
    reasons = v.get("reasons") or []
    cards.append(
        _card(
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
            _card(
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
        _card("output tok/s", _num(t["output_tokens_per_s"]), "", f"over {t['window_s']:g} s")
    )
    cards.append(_card("requests/s", _num(t["requests_per_s"])))
    for key, label in (("ttft", "TTFT p99"), ("itl", "ITL p99"), ("e2e", "E2E p99")):
        p = (lat.get(key) or {}).get("p99")
        cards.append(
            _card(label, _num(p, " ms"), "", f"p50 {_num((lat.get(key) or {}).get('p50'), ' ms')}")
        )
    g = m.get("goodput")
    if g and g.get("good_requests_per_s") is not None:
        cards.append(
            _card(
                "goodput",
                f"{_num(g['good_requests_per_s'])}/s",
                "",
                f"attainment {g['attainment']:.1%}",
            )
        )
    total = r["completed"] + r["failed"]
    cards.append(
        _card("failed", str(r["failed"]), "bad" if r["failed"] else "", f"of {total} measured")
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
    return _page(m["name"], header, run_strip(m), run_sections(m))


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
        summary.append("<h3>Stability</h3>" + _pairs(rows))
    latency, over_time = "", ""
    if m.get("latency_ms"):
        t, d = m["throughput"], m["definitions"]
        summary.append(
            "<h3>Headline</h3>"
            + _table(
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
            _svg(plots.percentile_plot([(m["name"], m["histograms"])]), "percentile plot")
            + "<h3>Latency (ms)</h3>"
            + _table(("metric",) + LAT_COLS, lat_rows)
            + "<ul class=def>"
            + "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in d.items())
            + "</ul>"
        )
    ts = m.get("timeseries") or {}
    gpu = m.get("gpu") or {}
    over_time = _svg(
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
        engine.append("<h3>Roofline</h3>" + _pairs(roof))
    rows = insight.gpu_rows(m.get("gpu"))
    if rows:
        engine.append("<h3>GPU telemetry</h3>" + _pairs(rows))
    rows, ops = insight.profile_rows(m.get("profile"))
    if rows:
        engine.append("<h3>Profiler window</h3>" + _pairs(rows))
    if ops:
        engine.append(
            _table(
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
        f"<h3>{esc(title)}</h3>" + _pairs(rows)
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
            _table(("key", "value"), [(esc(k), esc(v)) for k, v in env.items()]),
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
        + _table(("check", "verdict", "observed", "bound", "evidence"), rows)
    )


# -- sweep report --------------------------------------------------------------------------

SWEEP_COLS = (
    "x",
    "status",
    "steady",
    "output_tokens_per_s",
    "requests_per_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p99_ms",
)


def sweep_html(doc: dict) -> str:
    """sweep.html's text from a saved sweep.json."""
    axis, curve = doc["axis"], doc["curve"]
    kinds = [plots.point_kind(c) for c in curve]
    status_cls = {"ok": "good", "partial": "warn"}.get(doc["status"], "bad")
    strip = [
        _card("sweep", doc["status"], status_cls, f"{len(curve)} points over {axis}"),
        _card(
            "points",
            f"{kinds.count('steady')} steady",
            "",
            f"{kinds.count('unsteady')} unsteady, {kinds.count('invalid')} invalid",
        ),
        _card(
            "knee",
            "-" if doc["knee"] is None else str(doc["knee"]),
            "warn" if doc.get("knee_caveats") else "",
            "; ".join(doc.get("knee_caveats") or []) or "highest tok/s ÷ p99 E2E, steady points",
        ),
    ]
    best = max(
        (c.get("output_tokens_per_s") or 0 for c, k in zip(curve, kinds) if k == "steady"),
        default=0,
    )
    if best:
        strip.append(_card("best steady tok/s", _num(best)))
    if doc.get("max_rate"):
        mr = doc["max_rate"]
        strip.append(
            _card(
                "max rate meeting the SLA",
                f"{mr['rate']} req/s",
                "",
                f"first failing {mr['first_failing_rate']}",
            )
        )
    header = (
        f"<h1>Sweep over {esc(axis)}</h1><p class=meta>status <b class='{esc(doc['status'])}'>"
        f"{esc(doc['status'])}</b> · {esc(doc['scenario_file'])}</p>"
    )
    curves = "".join(
        f"<h3>{esc(name)}</h3>{svg}" for name, svg in plots.sweep_plots(curve, axis, doc["knee"])
    )
    knee = (
        f"<p>knee (highest throughput ÷ p99 E2E, steady points only): <b>{esc(doc['knee'])}</b> · "
        f"frontier: {esc(doc['frontier'])}</p>"
        + "".join(
            f"<p class=warn><b>caveat:</b> {esc(c)}</p>" for c in doc.get("knee_caveats") or []
        )
    )
    if doc.get("max_rate"):
        mr = doc["max_rate"]
        knee += (
            f"<p>Highest rate meeting the SLA: <b>{esc(mr['rate'])} req/s</b>; first failing "
            f"{esc(mr['first_failing_rate'])} req/s; tolerance {esc(mr['tolerance'])}. {esc(mr['evidence'])}</p>"
        )
    rows = [
        [
            f"<span class='{esc(k)}'>{esc(c.get(col))}</span>"
            if col == "status"
            else esc(c.get(col))
            for col in SWEEP_COLS
        ]
        for c, k in zip(curve, kinds)
    ]
    reasons = [
        (esc(p["params"]), esc(p["status"]), esc(p["reason"]))
        for p in doc["points"]
        if p.get("reason")
    ]
    points = _table(SWEEP_COLS, rows) + (
        "<h3>Marked points</h3>" + _table(("params", "status", "reason"), reasons)
        if reasons
        else ""
    )
    return _page(
        f"sweep {axis}",
        header,
        strip,
        [("curves", "Curves", knee + curves), ("points", "Points", points)],
    )


# -- comparison ----------------------------------------------------------------------------


def compare_html(
    a: str,
    b: str,
    checks: list[dict],
    confidence: float,
    histograms: tuple[dict[str, str], dict[str, str]],
    warnings: list[str],
) -> str:
    """compare.html: B against A, each headline metric's change with its interval, and the two
    runs' percentile curves overlaid (A solid, B dashed)."""
    sig = [c for c in checks if c["significant"]]
    strip = [
        _card("reference (A)", a),
        _card("compared (B)", b),
        _card(
            "significant changes",
            str(len(sig)),
            "warn" if sig else "good",
            ", ".join(f"{c['name']} {c['change_pct']:+.1f}%" for c in sig)
            or "none at this confidence",
        ),
    ]

    def pct(x) -> str:
        return "-" if x is None else f"{x:+.1f}%"

    rows = [
        (
            esc(f"{c['name']} ({c['unit']})"),
            esc(_num(c["baseline"])),
            esc(_num(c["candidate"])),
            esc(pct(c["change_pct"])),
            "-"
            if c["change_interval_pct"] is None
            else esc(f"{pct(c['change_interval_pct'][0])} .. {pct(c['change_interval_pct'][1])}"),
            "<b>yes</b>" if c["significant"] else ("-" if c["significant"] is None else "no"),
        )
        for c in checks
    ]
    deltas = (
        _table(("metric", "A", "B", "change", f"{confidence:.0%} interval*", "significant"), rows)
        + f"<p class=def>* simultaneous over the {len(checks)} metrics (Bonferroni); block bootstrap "
        "within runs, plus the between-run spread when there are replicates.</p>"
        + "".join(f"<p class=warn>warning: {esc(w)}</p>" for w in warnings)
    )
    overlay = _svg(
        plots.percentile_plot([(f"A {a}", histograms[0]), (f"B {b}", histograms[1])], name="cmp"),
        "percentile overlay",
    )
    header = f"<h1>{esc(a)} → {esc(b)}</h1><p class=meta>B compared with A at {confidence:.0%}</p>"
    return _page(
        f"compare {a} {b}",
        header,
        strip,
        [("comparison", "Headline deltas and percentiles overlaid", deltas + overlay)],
    )


# -- replicates ----------------------------------------------------------------------------


def repeat_html(doc: dict, histograms: list[tuple[str, dict[str, str]]]) -> str:
    """repeat.html: the pooled verdict, each headline metric's median and spread over the
    replicates, their percentile curves overlaid, and a link to each replicate's report."""
    sla = doc.get("sla")
    strip = [
        _card(
            "replicates", f"{len(doc['runs'])} of {doc['repeats']}", "", f"status {doc['status']}"
        ),
        _card(
            "pooled SLA",
            sla["verdict"] if sla else "none",
            sla["verdict"] if sla else "",
            "on all replicates' samples" if sla else "no sla: block",
        ),
    ]
    summary = doc.get("summary") or {}
    for key, label in (("output_tokens_per_s", "output tok/s"), ("ttft_p99", "TTFT p99 ms")):
        s = summary.get(key) or {}
        if s.get("n"):
            spread = "-" if s.get("spread_pct") is None else f"{s['spread_pct']:.1f}%"
            strip.append(_card(f"{label} (median)", _num(s["median"]), "", f"spread {spread}"))
    rows = [
        (
            esc(name),
            esc(_num(s["median"])),
            esc(_num(s["min"])),
            esc(_num(s["max"])),
            esc("-" if s["spread_pct"] is None else f"{s['spread_pct']:.1f}%"),
        )
        for name, s in summary.items()
        if s.get("n")
    ]
    body = _table(("metric", "median", "min", "max", "spread"), rows)
    body += "".join(f"<p class=warn>{esc(r)}</p>" for r in doc.get("reasons") or [])
    if sla:
        body += sla_html(sla)
    body += (
        "<h3>Replicates</h3><ul>"
        + "".join(f"<li><a href='{esc(d)}/report.html'>{esc(d)}</a></li>" for d in doc["runs"])
        + "</ul>"
    )
    overlay = _svg(plots.percentile_plot(histograms, name="rep"), "percentiles of each replicate")
    header = (
        f"<h1>{esc(doc['name'])}: {len(doc['runs'])} replicates</h1><p class=meta>schedule seeds "
        f"{esc(', '.join(map(str, doc['schedule_seeds'])))}</p>"
    )
    return _page(
        f"{doc['name']} replicates",
        header,
        strip,
        [
            ("summary", "Median and spread", body),
            ("overlay", "Percentiles of each replicate", overlay),
        ],
    )


def write_run(metrics: dict, run_dir: Path) -> Path:
    """Write report.html into the run directory; returns its path."""
    path = Path(run_dir) / "report.html"
    atomic.write_text(path, run_html(metrics))
    return path
