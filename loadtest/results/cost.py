"""The result's cost estimate (``pricing`` in the scenario): what the measured throughput costs.

Hourly prices (a deployment, or GPUs at a price each) are spread over the measured window's
rates: a second of the deployment over the output tokens, all tokens, requests and good
requests it carried that second. Per-token prices (a served API) price the measured requests'
own tokens, and spread that over the same counts. Either way an estimate: the run's load, at
the run's prices."""

from __future__ import annotations

from loadtest.config.objectives import Pricing
from loadtest.results.model import Cost, GoodputResult, Requests, Throughput


def estimate(
    pricing: Pricing | None,
    throughput: Throughput | None,
    requests: Requests,
    goodput: GoodputResult | None,
) -> Cost | None:
    """The cost per million output tokens, per million tokens, per request and per good
    request (where goodput is judged); None without pricing or throughput."""
    if pricing is None or throughput is None:
        return None
    hourly = pricing.hourly_usd
    if hourly is not None:
        usd_per_s = hourly / 3600.0
        good_rps = goodput.good_requests_per_s if goodput else None
        return Cost(
            basis="hourly",
            price_usd_per_hour=hourly,
            gpus=pricing.gpus,
            usd_per_million_output_tokens=_per(usd_per_s, throughput.output_tokens_per_s, 1e6),
            usd_per_million_tokens=_per(usd_per_s, throughput.total_tokens_per_s, 1e6),
            usd_per_request=_per(usd_per_s, throughput.requests_per_s),
            usd_per_good_request=_per(usd_per_s, good_rps),
        )
    tokens_in, tokens_out = requests.input_tokens or 0, requests.output_tokens or 0
    usd = (
        tokens_in * (pricing.usd_per_million_input_tokens or 0.0)
        + tokens_out * (pricing.usd_per_million_output_tokens or 0.0)
    ) / 1e6
    return Cost(
        basis="per_token",
        price_usd_per_million_input_tokens=pricing.usd_per_million_input_tokens or 0.0,
        price_usd_per_million_output_tokens=pricing.usd_per_million_output_tokens,
        usd_per_million_output_tokens=_per(usd, tokens_out, 1e6),
        usd_per_million_tokens=_per(usd, tokens_in + tokens_out, 1e6),
        usd_per_request=_per(usd, requests.completed),
        usd_per_good_request=_per(usd, goodput.good if goodput else None),
    )


def _per(usd: float, count: float | None, scale: float = 1.0) -> float | None:
    """``usd`` over ``count`` (times ``scale``), rounded to 6 significant figures; None where
    nothing was counted."""
    if not count:
        return None
    return float(f"{usd / count * scale:.6g}")
