"""The cost estimate as every report shows it: a run's rows (the prices used, then what its
measured throughput costs) and a sweep's cheapest point that meets the SLA."""

from __future__ import annotations

from loadtest.results.model import Cost, SweepDoc


def usd(x: float | None) -> str:
    """A price, to four significant figures ("-" where none was estimated)."""
    return "-" if x is None else f"${x:.4g}"


def cost_rows(cost: Cost | None) -> list[tuple[str, str]]:
    """Label/value rows of the cost estimate: the prices it used, then what the measured
    throughput costs."""
    if not cost:
        return []
    if cost.basis == "hourly":
        each = f" ({cost.gpus} GPUs)" if cost.gpus else ""
        prices = f"{usd(cost.price_usd_per_hour)} an hour{each}, over the measured rates"
    else:
        prices = (
            f"{usd(cost.price_usd_per_million_input_tokens)} / {usd(cost.price_usd_per_million_output_tokens)}"
            " per million input / output tokens, over the measured requests' tokens"
        )
    rows = [
        ("estimate at", prices),
        ("per million output tokens", usd(cost.usd_per_million_output_tokens)),
        ("per million tokens (input + output)", usd(cost.usd_per_million_tokens)),
        ("per request", usd(cost.usd_per_request)),
    ]
    if cost.usd_per_good_request is not None:
        rows.append(("per good request (goodput)", usd(cost.usd_per_good_request)))
    return rows


def cheapest_line(doc: SweepDoc) -> str:
    """The cheapest point that meets the SLA, as a sentence (an estimate: the scenario's
    prices at each point's measured throughput)."""
    c = doc.cheapest
    if c is None:
        judged = any(p.sla is not None for p in doc.curve)
        return (
            "cheapest point: none "
            + ("meets the SLA" if judged else "is valid and steady")
            + " among the priced points"
        )
    return (
        f"cheapest point ({c.among}): {doc.axis}={c.x}, "
        f"${c.usd_per_million_output_tokens:.4g} per million output tokens (estimate)"
    )
