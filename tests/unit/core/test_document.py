"""A section is written as given: a field never set is left out, a null that was set stays,
extras of an open section are kept; and it reads back to the same document."""

from __future__ import annotations

import json

import pytest
from pydantic import Field, ValidationError

from loadtest.core.document import OpenSection, Section


class Figure(Section):
    mean: float | None = None
    count: int | None = None
    kind: str | None = Field(None, alias="type")


class Holder(Section):
    name: str
    figure: Figure | None = None
    figures: list[Figure] = Field(default_factory=list)


class Facts(OpenSection):
    size: int | None = None


def test_a_field_never_set_is_left_out_and_a_null_that_was_set_stays():
    f = Figure(mean=None, count=3)
    assert f.model_dump() == {"mean": None, "count": 3}
    assert json.loads(f.model_dump_json()) == {"mean": None, "count": 3}
    # nested, in lists, and by alias
    h = Holder(name="h", figure=Figure(type="gauge"), figures=[Figure(), Figure(count=1)])
    assert h.model_dump(by_alias=True) == {
        "name": "h",
        "figure": {"type": "gauge"},
        "figures": [{}, {"count": 1}],
    }
    # a field set after construction is written too
    h.figure.mean = 2.5
    assert h.model_dump(by_alias=True)["figure"] == {"type": "gauge", "mean": 2.5}


def test_a_section_reads_back_to_what_was_written():
    h = Holder(name="h", figure=Figure(mean=None), figures=[Figure(count=2)])
    back = Holder.model_validate_json(h.model_dump_json(by_alias=True))
    assert back == h and back.model_dump() == h.model_dump()
    assert back.figure.model_fields_set == {"mean"}  # the null read back is still a null


def test_a_section_refuses_a_foreign_field_and_an_open_one_keeps_it():
    with pytest.raises(ValidationError, match="extra"):
        Figure.model_validate({"mean": 1.0, "meen": 2.0})
    facts = Facts.model_validate({"size": 2, "all_reduce": "nccl"})
    assert facts.size == 2 and facts.model_dump() == {"size": 2, "all_reduce": "nccl"}
    assert Facts().model_dump() == {}
