"""The base of every typed document the package writes: strict on read (a misspelt or foreign
field is an error, never dropped), and, for a section whose fields depend on what was measured,
written as given (a field never set is left out, not written as null)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from loadtest.core.json_types import JsonObject


class Document(BaseModel):
    """Strict on read: a misspelt or foreign field is an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)

    def view(self) -> JsonObject:
        """The JSON-shaped mapping, as written: for JSON and CSV writers and the Python API
        (readers in the package take the typed document)."""
        return self.model_dump(mode="json", by_alias=True)


class Section(Document):
    """A section whose fields are there where they were measured: those never set are left
    out when written, so a device without a metric, an unavailable sampler or a server
    without a counter reads as it did (a null is a value that was looked for and not found)."""

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        dumped: dict[str, object] = handler(self)
        given = (
            {
                (f.alias or name) if name in self.model_fields_set else None
                for name, f in type(self).model_fields.items()
            }
            | self.model_fields_set
            | set(self.model_extra or ())
        )
        return {k: v for k, v in dumped.items() if k in given}


class OpenSection(Section):
    """A section in a producer's own terms: the fields generic code reads are typed, and every
    other the producer gave is kept as given."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
