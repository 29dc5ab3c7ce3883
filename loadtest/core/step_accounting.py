"""What the roofline needs from the steps an engine ran: its prefills (batches, tokens, the
attention's query-key pairs, time) and decode steps (steps, rows computed, the context those
rows attended to, time). The engine worker adds to it as its steps end; the result keeps it."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import TypeAdapter


@dataclass
class StepAccounting:
    prefill_batches: int = 0
    prefill_tokens: int = 0
    prefill_attn_pairs: int = 0  # sum over prompts of k(k+1)/2: causal attention's pairs
    prefill_s: float = 0.0
    decode_steps: int = 0
    decode_rows: int = 0  # rows computed over the steps (a batch's rows, every step)
    decode_ctx_sum: int = 0  # context tokens those rows attended to
    decode_s: float = 0.0

    def plus(self, other: StepAccounting) -> StepAccounting:
        """Two engines' accounting as one (replicas: MBU their time-weighted mean)."""
        return StepAccounting(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    @classmethod
    def from_json(cls, value: object) -> StepAccounting:
        """From its JSON form (``asdict``), as a worker's facts carry it; validated."""
        return _adapter().validate_python(value)

    @property
    def decode_step_ms(self) -> float | None:
        return round(1e3 * self.decode_s / self.decode_steps, 3) if self.decode_steps else None


@functools.cache
def _adapter() -> TypeAdapter[StepAccounting]:
    from pydantic import TypeAdapter

    return TypeAdapter(StepAccounting)
