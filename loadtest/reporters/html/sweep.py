"""``sweep.html``: a sweep's curves, frontier, knee and points."""

from __future__ import annotations

from loadtest.reporters import cost, sweep_plots
from loadtest.reporters.html.page import card, esc, num, page, table
from loadtest.results.model import SweepDoc

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


def sweep_html(doc: SweepDoc) -> str:
    """sweep.html's text from a saved sweep.json."""
    kinds = [sweep_plots.point_kind(c) for c in doc.curve]
    header = (
        f"<h1>Sweep over {esc(doc.axis)}</h1><p class=meta>status <b class='{esc(doc.status)}'>"
        f"{esc(doc.status)}</b> · {esc(doc.scenario_file)}</p>"
    )
    curves = "".join(
        f"<h3>{esc(name)}</h3>{svg}"
        for name, svg in sweep_plots.sweep_plots(doc.curve, doc.axis, doc.knee, doc.cheapest)
    )
    return page(
        f"sweep {doc.axis}",
        header,
        _strip(doc, kinds),
        [("curves", "Curves", _knee(doc) + curves), ("points", "Points", _points(doc, kinds))],
    )


def _strip(doc: SweepDoc, kinds: list[str]) -> list[str]:
    """The verdict strip: the sweep's status, its points by kind, the knee, the best steady
    throughput and the highest rate meeting the SLA."""
    status_cls = {"ok": "good", "partial": "warn"}.get(doc.status, "bad")
    strip = [
        card("sweep", doc.status, status_cls, f"{len(doc.curve)} points over {doc.axis}"),
        card(
            "points",
            f"{kinds.count('steady')} steady",
            "",
            f"{kinds.count('unsteady')} unsteady, {kinds.count('unknown')} unknown, "
            f"{kinds.count('invalid')} invalid",
        ),
        card(
            "knee",
            "-" if doc.knee is None else str(doc.knee),
            "warn" if doc.knee_caveats else "",
            "; ".join(doc.knee_caveats) or "highest tok/s ÷ p99 E2E, steady points",
        ),
    ]
    best = max(
        (c.output_tokens_per_s or 0 for c, k in zip(doc.curve, kinds) if k == "steady"),
        default=0,
    )
    if best:
        strip.append(card("best steady tok/s", num(best)))
    if any(c.usd_per_million_output_tokens is not None for c in doc.curve):
        cheap = doc.cheapest
        strip.append(
            card(
                "cheapest meeting the SLA" if cheap is None or "SLA" in cheap.among else "cheapest",
                "none" if cheap is None else f"{doc.axis}={cheap.x}",
                "warn" if cheap is None else "",
                cost.cheapest_line(doc),
            )
        )
    if doc.max_rate:
        mr = doc.max_rate
        strip.append(
            card(
                "max rate meeting the SLA",
                f"{mr.rate} req/s",
                "",
                f"first failing {mr.first_failing_rate}",
            )
        )
    return strip


def _knee(doc: SweepDoc) -> str:
    out = (
        f"<p>knee (highest throughput ÷ p99 E2E, steady points only): <b>{esc(doc.knee)}</b> · "
        f"frontier: {esc(doc.frontier)}</p>"
        + "".join(f"<p class=warn><b>caveat:</b> {esc(c)}</p>" for c in doc.knee_caveats)
    )
    if doc.max_rate:
        mr = doc.max_rate
        out += (
            f"<p>Highest rate meeting the SLA: <b>{esc(mr.rate)} req/s</b>; first failing "
            f"{esc(mr.first_failing_rate)} req/s; tolerance {esc(mr.tolerance)}. {esc(mr.evidence)}</p>"
        )
    return out


def _points(doc: SweepDoc, kinds: list[str]) -> str:
    """Every point's figures, and the reasons of the points marked."""
    rows = [
        [
            f"<span class='{esc(k)}'>{esc(getattr(c, col))}</span>"
            if col == "status"
            else esc(sweep_plots.cell(c, col))
            for col in SWEEP_COLS
        ]
        for c, k in zip(doc.curve, kinds)
    ]
    reasons = [(esc(p.params), esc(p.status), esc(p.reason)) for p in doc.points if p.reason]
    return table(SWEEP_COLS, rows) + (
        "<h3>Marked points</h3>" + table(("params", "status", "reason"), reasons) if reasons else ""
    )
