"""``repeat.html``: replicates' median and spread, their percentile curves overlaid."""

from __future__ import annotations

from loadtest.reporters import plots
from loadtest.reporters.html.page import card, esc, num, page, svg, table
from loadtest.reporters.html.run import sla_html
from loadtest.results.model import RepeatDoc, RepeatStat


def repeat_html(doc: RepeatDoc, histograms: list[tuple[str, dict[str, str]]]) -> str:
    """repeat.html: the pooled verdict, each headline metric's median and spread over the
    replicates, their percentile curves overlaid, and a link to each replicate's report."""
    sla = doc.sla
    strip = [
        card("replicates", f"{len(doc.runs)} of {doc.repeats}", "", f"status {doc.status}"),
        card(
            "pooled SLA",
            sla.verdict if sla else "none",
            sla.verdict if sla else "",
            "on all replicates' samples" if sla else "no sla: block",
        ),
    ]
    summary = doc.summary
    for key, label in (("output_tokens_per_s", "output tok/s"), ("ttft_p99", "TTFT p99 ms")):
        stat = summary.get(key)
        if stat and stat.n:
            strip.append(card(f"{label} (median)", num(stat.median), "", f"spread {_spread(stat)}"))
    rows = [
        (
            esc(name),
            esc(num(stat.median)),
            esc(num(stat.min)),
            esc(num(stat.max)),
            esc(_spread(stat)),
        )
        for name, stat in summary.items()
        if stat.n
    ]
    body = table(("metric", "median", "min", "max", "spread"), rows)
    body += "".join(f"<p class=warn>{esc(r)}</p>" for r in doc.reasons)
    if sla:
        body += sla_html(sla)
    body += (
        "<h3>Replicates</h3><ul>"
        + "".join(f"<li><a href='{esc(d)}/report.html'>{esc(d)}</a></li>" for d in doc.runs)
        + "</ul>"
    )
    overlay = svg(plots.percentile_plot(histograms, name="rep"), "percentiles of each replicate")
    header = (
        f"<h1>{esc(doc.name)}: {len(doc.runs)} replicates</h1><p class=meta>schedule seeds "
        f"{esc(', '.join(map(str, doc.schedule_seeds)))}</p>"
    )
    return page(
        f"{doc.name} replicates",
        header,
        strip,
        [
            ("summary", "Median and spread", body),
            ("overlay", "Percentiles of each replicate", overlay),
        ],
    )


def _spread(stat: RepeatStat) -> str:
    return "-" if stat.spread_pct is None else f"{stat.spread_pct:.1f}%"
