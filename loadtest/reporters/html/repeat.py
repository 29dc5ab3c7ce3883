"""``repeat.html``: replicates' median and spread, their percentile curves overlaid."""

from __future__ import annotations

from loadtest.reporters import plots
from loadtest.reporters.html.page import card, esc, num, page, svg, table
from loadtest.reporters.html.run import sla_html


def repeat_html(doc: dict, histograms: list[tuple[str, dict[str, str]]]) -> str:
    """repeat.html: the pooled verdict, each headline metric's median and spread over the
    replicates, their percentile curves overlaid, and a link to each replicate's report."""
    sla = doc.get("sla")
    strip = [
        card(
            "replicates", f"{len(doc['runs'])} of {doc['repeats']}", "", f"status {doc['status']}"
        ),
        card(
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
            strip.append(card(f"{label} (median)", num(s["median"]), "", f"spread {spread}"))
    rows = [
        (
            esc(name),
            esc(num(s["median"])),
            esc(num(s["min"])),
            esc(num(s["max"])),
            esc("-" if s["spread_pct"] is None else f"{s['spread_pct']:.1f}%"),
        )
        for name, s in summary.items()
        if s.get("n")
    ]
    body = table(("metric", "median", "min", "max", "spread"), rows)
    body += "".join(f"<p class=warn>{esc(r)}</p>" for r in doc.get("reasons") or [])
    if sla:
        body += sla_html(sla)
    body += (
        "<h3>Replicates</h3><ul>"
        + "".join(f"<li><a href='{esc(d)}/report.html'>{esc(d)}</a></li>" for d in doc["runs"])
        + "</ul>"
    )
    overlay = svg(plots.percentile_plot(histograms, name="rep"), "percentiles of each replicate")
    header = (
        f"<h1>{esc(doc['name'])}: {len(doc['runs'])} replicates</h1><p class=meta>schedule seeds "
        f"{esc(', '.join(map(str, doc['schedule_seeds'])))}</p>"
    )
    return page(
        f"{doc['name']} replicates",
        header,
        strip,
        [
            ("summary", "Median and spread", body),
            ("overlay", "Percentiles of each replicate", overlay),
        ],
    )
