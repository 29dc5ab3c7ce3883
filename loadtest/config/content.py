"""What a request carries besides its prompt: tools to call, a format the answer must take,
images and audio. Each is sent the way the OpenAI API takes it (``backends/openai/bodies.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from loadtest.config.types import StrictModel

MAX_SIDE = 8192  # pixels: a typo must not render a gigapixel image per request
MAX_AUDIO_S = 600.0
# raw bytes of one request's images (RGB) or audio (16-bit samples) rendered: each set is held
# in memory before t0 and sent with every request, so a typo (64 images of 8192x8192: 12 GiB)
# must be refused, not rendered
MAX_RAW_MEDIA_BYTES = 256 << 20


class SyntheticTools(StrictModel):
    """``count`` seeded tool definitions, each a function taking a few typed parameters."""

    count: int = Field(ge=1, le=128, description="How many tools each request offers.")


class Tools(StrictModel):
    """Tools offered with every chat request, from a file or made up."""

    file: str | None = Field(
        None,
        description="A JSON file holding a list of OpenAI tool definitions "
        '([{"type": "function", "function": {"name", "parameters"}}, ...]).',
    )
    count: int | None = Field(
        None, ge=1, le=128, description="Or this many synthetic tools (seeded by seeds.prompts)."
    )
    choice: str | dict = Field(
        "auto",
        description="tool_choice: auto, required, none, or a tool's name (that tool is forced).",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_shorthand(cls, data):
        if isinstance(data, str):  # `tools: tools.json`
            return {"file": data}
        return data

    @model_validator(mode="after")
    def _one_source(self):
        if (self.file is None) == (self.count is None):
            raise ValueError("give file (a JSON list of tool definitions) or count, not both")
        return self


class ResponseFormat(StrictModel):
    """The form the answer must take: any JSON object, or JSON valid against a schema."""

    type: Literal["json_object", "json_schema"] = Field(
        description="json_object: any JSON object; json_schema: valid against `schema`."
    )
    json_schema: dict | None = Field(
        None, alias="schema", description="The JSON Schema (json_schema), inline."
    )
    schema_file: str | None = Field(
        None, description="Or a JSON file holding the schema (json_schema)."
    )
    name: str = Field("answer", description="The schema's name, as the API asks for one.")

    @model_validator(mode="before")
    @classmethod
    def _from_shorthand(cls, data):
        if data == "json_object":
            return {"type": "json_object"}
        return data

    @model_validator(mode="after")
    def _schema_given(self):
        given = (self.json_schema is not None) + (self.schema_file is not None)
        if self.type == "json_schema" and given != 1:
            raise ValueError("json_schema needs one of schema (inline) or schema_file")
        if self.type == "json_object" and given:
            raise ValueError("json_object takes no schema (use type: json_schema)")
        return self


class Images(StrictModel):
    """Seeded synthetic images sent with each chat request, as ``image_url`` data URIs."""

    count: int = Field(1, ge=1, le=64, description="Images per request.")
    width: int = Field(512, ge=1, le=MAX_SIDE, description="Pixels.")
    height: int = Field(512, ge=1, le=MAX_SIDE, description="Pixels.")
    format: Literal["png", "jpeg"] = Field("png", description="Encoded as PNG or JPEG.")

    @model_validator(mode="after")
    def _budget(self):
        raw = self.count * self.width * self.height * 3
        if raw > MAX_RAW_MEDIA_BYTES:
            raise ValueError(
                f"{self.count} images of {self.width}x{self.height} are {raw / 2**20:,.0f} MiB "
                f"of pixels a request, over {MAX_RAW_MEDIA_BYTES >> 20} MiB: fewer or smaller"
            )
        return self


class Audio(StrictModel):
    """Seeded synthetic audio (16-bit mono WAV) sent with each chat request as ``input_audio``."""

    seconds: float = Field(gt=0, le=MAX_AUDIO_S, description="Length of each clip.")
    sample_rate: int = Field(16_000, ge=1000, le=192_000, description="Samples a second.")
    count: int = Field(1, ge=1, le=16, description="Clips per request.")

    @model_validator(mode="after")
    def _budget(self):
        raw = self.count * self.seconds * self.sample_rate * 2
        if raw > MAX_RAW_MEDIA_BYTES:
            raise ValueError(
                f"{self.count} clips of {self.seconds:g} s at {self.sample_rate} Hz are "
                f"{raw / 2**20:,.0f} MiB of samples a request, over "
                f"{MAX_RAW_MEDIA_BYTES >> 20} MiB: fewer, shorter or a lower rate"
            )
        return self
