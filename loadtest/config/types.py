"""Field types shared by the scenario models: durations and rates as users write them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from loadtest.core.units import format_duration_ns, parse_duration_ns, parse_rate_per_s

# Integer ns inside; "30s", "500ms", 2.5 (seconds) outside; echoed back in the shortest unit.
Duration = Annotated[
    int, BeforeValidator(parse_duration_ns), PlainSerializer(format_duration_ns, return_type=str)
]
# Requests per second; "4/s", "120/m" or a bare number.
Rate = Annotated[float, BeforeValidator(parse_rate_per_s), Field(gt=0)]
# A duration that must be more than zero (a window, an interval, a timeout).
PositiveDuration = Annotated[Duration, Field(gt=0)]


def as_written(text: str) -> Any:
    """A duration default as a user writes it ("5ms"): validated like input (the models set
    ``validate_default``), and shown that way in the JSON Schema."""
    return text


class StrictModel(BaseModel):
    """Base of every scenario model: unknown keys and non-finite numbers refused, frozen."""

    model_config = ConfigDict(
        allow_inf_nan=False,
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        validate_default=True,
    )
