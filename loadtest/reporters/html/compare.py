"""``compare-vs-<A>.html``: two runs side by side, their percentile curves overlaid."""

from __future__ import annotations

from loadtest.reporters import plots
from loadtest.reporters.figures import change_pct
from loadtest.reporters.html.page import card, esc, num, page, svg, table
from loadtest.results.model import RegressionCheck


def compare_html(
    a: str,
    b: str,
    checks: list[RegressionCheck],
    confidence: float,
    histograms: tuple[dict[str, str], dict[str, str]],
    warnings: list[str],
) -> str:
    """compare.html: B against A, each headline metric's change with its interval, and the two
    runs' percentile curves overlaid (A solid, B dashed)."""
    sig = [c for c in checks if c.significant]
    strip = [
        card("reference (A)", a),
        card("compared (B)", b),
        card(
            "significant changes",
            str(len(sig)),
            "warn" if sig else "good",
            ", ".join(f"{c.name} {c.change_pct:+.1f}%" for c in sig) or "none at this confidence",
        ),
    ]

    rows = [
        (
            esc(f"{c.name} ({c.unit})"),
            esc(num(c.baseline)),
            esc(num(c.candidate)),
            esc(change_pct(c.change_pct)),
            "-"
            if c.change_interval_pct is None
            else esc(
                f"{change_pct(c.change_interval_pct[0])} .. {change_pct(c.change_interval_pct[1])}"
            ),
            "<b>yes</b>" if c.significant else ("-" if c.significant is None else "no"),
        )
        for c in checks
    ]
    deltas = (
        table(("metric", "A", "B", "change", f"{confidence:.0%} interval*", "significant"), rows)
        + f"<p class=def>* simultaneous over the {len(checks)} metrics (Bonferroni); block bootstrap "
        "within runs, plus the between-run spread when there are replicates.</p>"
        + "".join(f"<p class=warn>warning: {esc(w)}</p>" for w in warnings)
    )
    overlay = svg(
        plots.percentile_plot([(f"A {a}", histograms[0]), (f"B {b}", histograms[1])], name="cmp"),
        "percentile overlay",
    )
    header = f"<h1>{esc(a)} → {esc(b)}</h1><p class=meta>B compared with A at {confidence:.0%}</p>"
    return page(
        f"compare {a} {b}",
        header,
        strip,
        [("comparison", "Headline deltas and percentiles overlaid", deltas + overlay)],
    )
