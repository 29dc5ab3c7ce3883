"""What is sent: prompt and output lengths (fixed or drawn from a distribution), datasets,
shared prefixes and multi-turn sessions."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from loadtest.config.content import Audio, Images, ResponseFormat, Tools
from loadtest.config.types import Duration, StrictModel

_Model = StrictModel

MAX_TOKENS = 10_000_000  # per request, input or output: a typo must not exhaust memory
MAX_MODELS = 64  # a model mix's names (each has its own histograms)
MAX_MODEL_NAME = 256
MAX_WEIGHT = 1e9  # a mix's weights are ratios; past this their sum could overflow


class _Clipped(_Model):
    min: int = Field(1, ge=1, le=MAX_TOKENS, description="Lengths below this are raised to it.")
    max: int = Field(
        1_000_000, ge=1, le=MAX_TOKENS, description="Lengths above this are lowered to it."
    )

    @model_validator(mode="after")
    def _ordered(self):
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self


class FixedLength(_Model):
    """Every request has the same number of tokens."""

    dist: Literal["fixed"]
    value: int = Field(ge=1, le=MAX_TOKENS, description="Every request has this many tokens.")


class UniformLength(_Clipped):
    """Lengths drawn uniformly between min and max."""

    dist: Literal["uniform"]


class NormalLength(_Clipped):
    """Lengths from a normal distribution, clipped to [min, max]."""

    dist: Literal["normal"]
    mean: float = Field(gt=0, le=MAX_TOKENS, description="Mean length in tokens.")
    std: float = Field(ge=0, description="Standard deviation in tokens.")


class LognormalLength(_Clipped):
    """Lengths from a lognormal distribution with the given mean, clipped to [min, max]."""

    dist: Literal["lognormal"]
    mean: float = Field(
        gt=0, description="Mean length in tokens (of the distribution, not of its log)."
    )
    sigma: float = Field(ge=0, description="Standard deviation of the log of the length.")


LengthDist = Annotated[
    FixedLength | UniformLength | NormalLength | LognormalLength, Field(discriminator="dist")
]
LengthSpec = Annotated[int, Field(ge=1, le=MAX_TOKENS)] | LengthDist


class SharedPrefix(_Model):
    """Synthetic prompts in groups sharing a prefix (system prompts, few-shot examples): what
    prefix caching is measured with."""

    groups: int = Field(ge=1, le=100_000, description="How many distinct prefixes.")
    tokens: int = Field(ge=1, le=MAX_TOKENS, description="Tokens in each shared prefix.")


class MultiTurn(_Model):
    """Sessions: a conversation's turns go in order, one at a time, and each turn's history holds
    the replies the system under test actually gave to the earlier turns."""

    turns: LengthSpec | None = Field(
        None,
        description="Turns per session for synthetic prompts (default 3; input_tokens is each "
        "turn's new message). With a dataset: the conversation's own user turns.",
    )
    max_turns: int | None = Field(
        None, ge=1, le=10_000, description="Cap on turns per session (a dataset's long chats)."
    )
    think_time: Duration = Field(
        0, description="Pause between a turn's reply and the session's next turn."
    )
    think: Literal["fixed", "exponential"] = Field(
        "fixed", description="Think time fixed, or exponential with that mean."
    )


class Workload(_Model):
    """What each request asks for: input and output lengths, or a dataset of prompts."""

    input_tokens: LengthSpec | None = Field(
        None, description="Synthetic prompt length (tokens of the backend's tokenizer)."
    )
    dataset: str | None = Field(
        None,
        description='JSONL file: one {"prompt": ...} or {"messages": [...]} a line (with '
        '"images": [URL or file, ...] sent beside it to chat and responses); or a '
        "ShareGPT file (JSON or JSONL of {conversations: [{from, value}, ...]}, detected from "
        "its content: each conversation's first human turn is a prompt; with multi_turn, every "
        "turn). `hf:org/name` (or `hf:` and a local dataset folder): a Hugging Face dataset, "
        "read with the `datasets` extra.",
    )
    dataset_max_rows: int = Field(
        100_000,
        ge=1,
        le=10_000_000,
        description="Rows of a dataset read into the plan, from its start; the rest are "
        "counted, not kept (memory stays bounded), and the result says so.",
    )
    dataset_split: str = Field("train", description="hf: datasets: the split to read.")
    dataset_columns: dict[Literal["prompt", "messages", "conversations", "images"], str] = Field(
        default_factory=dict,
        description="hf: datasets: which column holds the prompt, the messages, the "
        "conversations or the images, where it is not named so (e.g. {prompt: question}).",
    )
    shared_prefix: SharedPrefix | None = Field(
        None,
        description="Each synthetic prompt starts with one of `groups` shared prefixes of "
        "`tokens` tokens (chosen by the prompts seed); input_tokens is the distinct suffix.",
    )
    multi_turn: MultiTurn | None = Field(
        None,
        description="Multi-turn sessions (`true`, or {turns, max_turns, think_time, think}). "
        "Open loop: a session starts at each arrival; closed loop: each user runs sessions.",
    )
    text: Literal["natural", "random"] = Field(
        "natural",
        description="Synthetic prompts' text (shared prefixes and session turns too): natural, "
        "seeded passages of an English corpus shipped with loadtest, cut to length with the "
        "model's tokenizer; random, seeded random tokens of its vocabulary.",
    )
    output_tokens: LengthSpec = Field(
        128, description="Output length: exact (fixed) or the cap (natural)."
    )
    output: Literal["fixed", "natural"] = Field(
        "fixed", description="fixed: ignore EOS, generate exactly; natural: stop at EOS."
    )
    inputs_per_request: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="api: embeddings: texts a request embeds, each sized like a prompt "
        "(default 1).",
    )
    documents: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="api: rerank: documents ranked against each request's query (the prompt), "
        "each sized like a prompt.",
    )
    tools: Tools | None = Field(
        None,
        description="Tools offered with each request (chat, responses): a JSON file of tool "
        "definitions or {count: N} synthetic ones, and tool_choice as `choice`.",
    )
    response_format: ResponseFormat | None = Field(
        None,
        description="The answer's required form (chat, responses): json_object, or "
        "{type: json_schema, schema: {...}}; outputs that do not parse or validate are counted.",
    )
    images: Images | None = Field(
        None, description="Synthetic images sent with each request (chat, responses)."
    )
    audio: Audio | None = Field(
        None, description="Synthetic audio clips sent with each request (chat)."
    )

    models: dict[str, float] | None = Field(
        None,
        description="A model mix: each request (each session) goes to one of these served "
        "models or LoRA adapters, drawn by the prompts seed in these shares (weights); the "
        "result, the reports and the SLA checks break latency and throughput down per model. "
        "kind: openai (names the server serves) and sim.",
    )

    @field_validator("models")
    @classmethod
    def _weights(cls, models):
        if models is None:
            return models
        if not 1 <= len(models) <= MAX_MODELS:
            raise ValueError(f"name 1 to {MAX_MODELS} models")
        for name, weight in models.items():
            if not name.strip():
                raise ValueError("a model's name is empty")
            if not name.isprintable() or len(name) > MAX_MODEL_NAME:
                # it is sent, and written into every report and SLA check's name
                raise ValueError(
                    f"{name[:40]!r}: a model's name is printable and at most {MAX_MODEL_NAME} "
                    "characters"
                )
            if not (math.isfinite(weight) and 0 < weight <= MAX_WEIGHT):
                raise ValueError(
                    f"{name}: a weight is a positive number up to {MAX_WEIGHT:g}, got {weight!r}"
                )
        return models

    @model_validator(mode="before")
    @classmethod
    def _one_prompt_source(cls, data):
        if isinstance(data, dict):
            has_input, has_dataset = (
                data.get("input_tokens") is not None,
                data.get("dataset") is not None,
            )
            if has_input and has_dataset:
                raise ValueError("give either input_tokens or dataset, not both")
            if has_dataset and data.get("shared_prefix") is not None:
                raise ValueError("shared_prefix is for synthetic prompts, not a dataset")
            if not has_input and not has_dataset:
                data = {**data, "input_tokens": 128}
            turns = data.get("multi_turn")
            if turns is True:
                data = {**data, "multi_turn": {}}
            elif turns is False:
                data = {**data, "multi_turn": None}
            elif has_dataset and isinstance(turns, dict) and turns.get("turns") is not None:
                raise ValueError(
                    "multi_turn.turns is for synthetic prompts: a dataset's conversations have "
                    "their own turns (cap them with max_turns)"
                )
        return data
