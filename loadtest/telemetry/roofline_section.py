"""The ``roofline`` section of ``metrics.json``, typed: the device's peaks, the model's costs
per token and step, decode's and prefill's achieved rates against them (MBU, MFU), and the
diagnosis with its evidence and remedies."""

from __future__ import annotations

from loadtest.core.document import Section


class Peaks(Section):
    """The device's roof: measured by ``loadtest calibrate``, or the datasheet's."""

    bw_gb_s: float
    tflops: float
    source: str


class ModelCosts(Section):
    """A decoder-only transformer's costs, from its config."""

    linear_flops_per_token: int
    attention_flops_per_token_per_context: int
    weight_bytes: int
    kv_bytes_per_token: int


class DecodeRoof(Section):
    """Decode's steps against the roof (``mbu``, ``mfu``, ``floor_ms`` where peaks are known)."""

    steps: int
    step_ms: float
    batch_mean: float
    bytes_per_step: int
    achieved_gb_s: float
    achieved_tflops: float
    intensity_flop_per_byte: float  # where the step sits on the roofline's x axis
    mbu: float | None = None
    mfu: float | None = None
    floor_ms: float | None = None  # the step's time at the bandwidth roof


class PrefillRoof(Section):
    """Prefill's tokens against the compute roof."""

    batches: int | None
    tokens: int
    tokens_per_s: float
    achieved_tflops: float
    intensity_flop_per_byte: float | None = None
    mfu: float | None = None


class Diagnosis(Section):
    """memory-bound, compute-bound or host/launch-bound, with its evidence and remedies."""

    verdict: str
    evidence: list[str]
    remedies: list[str]
    host_heavy_ops: list[str]


class RooflineSection(Section):
    """Where the run sits against the hardware (in-process engines)."""

    peaks: Peaks | None
    model: ModelCosts
    decode: DecodeRoof | None = None
    prefill: PrefillRoof | None = None
    estimated: str | None = None  # how decode was estimated, where the engine timed no steps
    diagnosis: Diagnosis | None = None
