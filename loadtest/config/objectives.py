"""What counts as good in a scenario: the service-level objectives (``sla``), the per-request
ones that make goodput (``goodput``), and the price the cost estimate uses (``pricing``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, create_model, model_validator

from loadtest.config.types import Duration, StrictModel
from loadtest.core.units import PERCENTILE_NAMES

_Model = StrictModel

# --- SLA: one optional field per metric and percentile, generated ----------------------------

SLA_METRICS = ("ttft", "ttft_service", "ttft_answer", "itl", "tpot", "e2e", "e2e_service", "queue")
# field name -> (metric, percentile): the one table that says what ``ttft_p99`` means.
SLA_LATENCY_FIELDS: dict[str, tuple[str, float]] = {
    f"{m}_{p}": (m, pct) for m in SLA_METRICS for p, pct in PERCENTILE_NAMES.items()
}


class SlaObjectives(_Model):
    """Service-level objectives; each becomes a PASS / FAIL / INCONCLUSIVE check. ``Sla`` adds
    one optional latency bound per metric and percentile (``ttft_p99: 500ms``)."""

    error_rate: float | None = Field(
        None, ge=0, le=1, description="Failed / finished requests must be at most this."
    )
    output_tokens_per_s: float | None = Field(
        None, ge=0, description="Output tokens/s must be at least this."
    )
    requests_per_s: float | None = Field(
        None, ge=0, description="Completed requests/s must be at least this."
    )
    answers_match_min: float | None = Field(
        None,
        ge=0,
        le=1,
        description="answers: the share of answers under load that match their reference "
        "must be at least this (judged on its interval: PASS only when its lower end clears "
        "it, FAIL when its upper end misses it).",
    )
    confidence: float = Field(
        0.99,
        gt=0.5,
        lt=1,
        description="Confidence a percentile PASS needs (MLPerf early stopping).",
    )

    def latency_bounds(self) -> list[tuple[str, str, float, int]]:
        """``(field, metric, percentile, bound in ns)`` for every latency objective set."""
        return [
            (name, metric, pct, getattr(self, name))
            for name, (metric, pct) in SLA_LATENCY_FIELDS.items()
            if getattr(self, name) is not None
        ]


if TYPE_CHECKING:  # the generated fields are read through latency_bounds(), by name
    Sla = SlaObjectives
else:
    Sla = create_model(
        "Sla",
        __base__=SlaObjectives,
        __doc__="Service-level objectives; each becomes a PASS / FAIL / INCONCLUSIVE check.",
        **{
            name: (Duration | None, Field(None, description=f"{m} p{pct:g} must be at most this."))
            for name, (m, pct) in SLA_LATENCY_FIELDS.items()
        },
    )


class Pricing(_Model):
    """What the system under test costs, for the result's cost estimate: the deployment by
    the hour (``usd_per_hour``, or ``usd_per_gpu_hour`` with ``gpus``), or a served API's price
    per million input and output tokens."""

    usd_per_hour: float | None = Field(
        None, gt=0, description="The whole deployment's price an hour, USD."
    )
    usd_per_gpu_hour: float | None = Field(
        None, gt=0, description="One GPU's price an hour, USD (with gpus)."
    )
    gpus: int | None = Field(
        None, ge=1, description="GPUs the deployment holds (with usd_per_gpu_hour)."
    )
    usd_per_million_input_tokens: float | None = Field(
        None, ge=0, description="A served API's price per million prompt tokens, USD."
    )
    usd_per_million_output_tokens: float | None = Field(
        None, ge=0, description="A served API's price per million output tokens, USD."
    )

    @model_validator(mode="after")
    def _one_basis(self):
        hourly = self.usd_per_hour is not None
        per_gpu = self.usd_per_gpu_hour is not None or self.gpus is not None
        tokens = (
            self.usd_per_million_input_tokens is not None
            or self.usd_per_million_output_tokens is not None
        )
        if per_gpu and (self.usd_per_gpu_hour is None or self.gpus is None):
            raise ValueError("usd_per_gpu_hour and gpus go together")
        if hourly + per_gpu + tokens != 1:
            raise ValueError(
                "give one price: usd_per_hour, usd_per_gpu_hour with gpus, or "
                "usd_per_million_input_tokens and usd_per_million_output_tokens"
            )
        if tokens and self.usd_per_million_output_tokens is None:
            raise ValueError("a per-token price needs usd_per_million_output_tokens")
        return self

    @property
    def hourly_usd(self) -> float | None:
        """The deployment's price an hour (None: priced per token)."""
        if self.usd_per_gpu_hour is not None and self.gpus is not None:
            return self.usd_per_gpu_hour * self.gpus
        return self.usd_per_hour


class Goodput(_Model):
    """Per-request objectives: a request is good when it completed and met every one set
    (goodput = good requests per second; attainment = good / finished)."""

    ttft: Duration | None = Field(None, description="Time to first token at most this.")
    tpot: Duration | None = Field(
        None, description="Time per output token at most this (requests with 2+ tokens)."
    )
    e2e: Duration | None = Field(None, description="End-to-end latency at most this.")

    @model_validator(mode="after")
    def _some(self):
        if self.ttft is None and self.tpot is None and self.e2e is None:
            raise ValueError("set at least one of ttft, tpot, e2e")
        return self
