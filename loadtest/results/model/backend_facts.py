"""What a backend said about itself (``metrics.json``'s ``backend``): the facts generic code
reads, typed; every fact of the backend's own kind kept as given, in the order given; and the
outputs it checked (tool calls, structured answers) and the media it sent."""

from __future__ import annotations

from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from loadtest.core.document import OpenSection, Section
from loadtest.core.json_types import JsonObject
from loadtest.core.step_accounting import StepAccounting
from loadtest.results.model.base import _Doc


class ToolCallChecks(_Doc):
    """Tool calls the measured requests returned, and how many were not usable: arguments
    that are not JSON, or JSON that breaks the tool's schema, or a call to no offered tool."""

    offered: int  # tools offered with each request
    choice: str  # tool_choice as sent
    requests: int  # measured requests checked
    requests_with_calls: int
    calls: int
    bad_json: int
    schema_mismatch: int
    unknown_tool: int
    cut_at_length: int  # arguments cut off by the output length (not parsed: incomplete)
    missing: int  # requests that had to call a tool (required, or one named) and did not


class StructuredChecks(_Doc):
    """Answers asked for in a format (json_object or a JSON schema), and how many broke it."""

    format: str  # json_object | json_schema
    checked: int
    bad_json: int
    schema_mismatch: int
    cut_at_length: int  # answers cut off by the output length (not parsed: incomplete)


class MediaSent(_Doc):
    """Images and audio each request carried (seeded synthetic, encoded as sent)."""

    images_per_request: int = 0
    image_size: str | None = None  # "512x512 png"
    image_bytes_mean: float | None = None  # encoded, before base64
    audio_per_request: int = 0
    audio_seconds: float | None = None
    audio_bytes_mean: float | None = None
    distinct_sets: int | None = None  # rendered before t0; more requests than this cycle them


Number = int | float  # as the backend gave it: an int stays an int in the JSON


class ReplicaFacts(OpenSection):
    """One engine replica: where it ran and, per point, what it did."""

    index: int | None = None
    devices: list[str] | None = None
    cpus: str | None = None
    requests: int | None = None
    batches: int | None = None
    decode_step_ms: float | None = None
    peak_mem_mb: Number | None = None


class TensorParallelFacts(OpenSection):
    """An engine split over ranks: how many, each rank's share of the shape, its all-reduce."""

    size: int | None = None
    per_rank: dict[str, int] | None = None
    all_reduce: str | None = None


class OutputChecks(Section):
    """What the backend checked of the outputs, and the media it sent."""

    tool_calls: ToolCallChecks | None = None
    structured: StructuredChecks | None = None
    media: MediaSent | None = None


class BackendFacts(_Doc):
    """What the backend said about itself: its kind and name, the facts generic code reads
    (typed here), and every fact of its own kind (kept as given: each kind has its own). Written
    with exactly the keys given, none added."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    kind: str
    name: str | None = None
    error: str | None = None  # why it did not start, or failed to report
    warnings: list[str] = Field(default_factory=list)  # what the backend saw that casts doubt
    peak_mem_mb: Number | None = None
    recompiles_in_window: int | None = None  # torch.compile graphs built inside the window
    cudagraph_skips: int | None = None  # compiled graphs run without a CUDA graph (on CUDA)
    stamp_mismatches: int | None = None  # batches whose stamps did not match their tokens
    mode: str | None = None  # an engine's batching mode
    device_name: str | None = None
    parameter_bytes: int | None = None
    dtype_bytes: int | None = None
    shape_config: JsonObject | None = None  # the model's shape, for the roofline
    roofline_acct: StepAccounting | None = None  # the engine's step accounting
    ray: JsonObject | None = None  # the Ray cluster the workers ran on
    # where a local engine ran: its device and CPUs, its replicas and how requests were routed
    # to them, its tensor-parallel split, and the loop its decode steps ran in
    device: str | None = None
    cpus: str | None = None
    routing: str | None = None
    replicas: list[ReplicaFacts] | None = None
    tensor_parallel: TensorParallelFacts | None = None
    decode_loop: str | None = None
    decode_loop_off: str | None = None  # why not pipelined
    checks: OutputChecks | None = None  # outputs checked: tool calls, structured answers, media

    _order: list[str] = PrivateAttr(default_factory=list)  # the keys as given, in order

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: object, handler: ValidatorFunctionWrapHandler) -> BackendFacts:
        facts: BackendFacts = handler(data)
        if isinstance(data, dict):
            facts._order = list(data)
        return facts

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        dumped = handler(self)
        given = self.model_fields_set | set(self.model_extra or {})
        order = [k for k in self._order if k in dumped] + [
            k for k in dumped if k not in self._order
        ]
        return {k: dumped[k] for k in order if k in given}
