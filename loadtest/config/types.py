"""Field types shared by the scenario models: durations and rates as users write them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
)

from loadtest.core.units import format_duration_ns, parse_duration_ns, parse_rate_per_s

# The JSON Schema says what users write (an editor checks files against it), not the integer
# nanoseconds inside: a number of seconds, or a number with a unit.
_DURATION_SCHEMA = {
    "anyOf": [
        {"type": "number", "minimum": 0},
        {
            "type": "string",
            "pattern": r"^\s*[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?\s*(ns|us|µs|ms|s|m|h)?\s*$",
        },
    ],
    "examples": ["30s", "500ms", "2m", 1.5],
}
_RATE_SCHEMA = {
    "anyOf": [
        {"type": "number", "exclusiveMinimum": 0},
        {
            "type": "string",
            "pattern": r"^\s*[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?\s*(/\s*(s|sec|m|min|h)|rps|req/s)?\s*$",
        },
    ],
    "examples": [20, "4/s", "120/m"],
}
# Integer ns inside; "30s", "500ms", 2.5 (seconds) outside; echoed back in the shortest unit.
Duration = Annotated[
    int,
    BeforeValidator(parse_duration_ns),
    PlainSerializer(format_duration_ns, return_type=str),
    WithJsonSchema(_DURATION_SCHEMA),
]
# Requests per second; "4/s", "120/m" or a bare number.
Rate = Annotated[
    float, BeforeValidator(parse_rate_per_s), Field(gt=0), WithJsonSchema(_RATE_SCHEMA)
]
# A duration that must be more than zero (a window, an interval, a timeout).
PositiveDuration = Annotated[Duration, Field(gt=0), WithJsonSchema(_DURATION_SCHEMA)]


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
