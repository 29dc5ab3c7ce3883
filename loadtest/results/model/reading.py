"""Reading a result file back: through its typed model, so a file that does not fit is refused
with the field that does not, never half-read; a file of another schema version is named."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from loadtest.core import outside
from loadtest.results.model.base import REPEAT_SCHEMA, RUN_SCHEMA, SWEEP_SCHEMA
from loadtest.results.model.run import RunMetrics
from loadtest.results.model.sets import RepeatDoc, SweepDoc


class ResultReadError(Exception):
    """A result file that cannot be read as what it claims to be (a usage error)."""


def read_run(path: Path) -> RunMetrics:
    """``metrics.json`` -> RunMetrics; a clear ResultReadError for a foreign, older or broken file."""
    return _read(path, RunMetrics, RUN_SCHEMA)


def read_repeat(path: Path) -> RepeatDoc:
    """``repeat.json`` -> RepeatDoc (or a ResultReadError naming the problem)."""
    return _read(path, RepeatDoc, REPEAT_SCHEMA)


def read_sweep(path: Path) -> SweepDoc:
    """``sweep.json`` -> SweepDoc (or a ResultReadError naming the problem)."""
    return _read(path, SweepDoc, SWEEP_SCHEMA)


D = TypeVar("D", bound=BaseModel)


def _read(path: Path, model: type[D], schema: str) -> D:

    try:
        text = outside.read_text(Path(path))
    except OSError as exc:
        raise ResultReadError(f"{path}: {exc.strerror or exc}") from None
    except outside.OutsideTextError as exc:
        raise ResultReadError(f"{path}:{exc.line}: {exc}") from None
    try:
        head = outside.loads(text)
    except ValueError as exc:  # not JSON, NaN, nested too deeply
        raise ResultReadError(f"{path}: not JSON: {exc}") from None
    found = head.get("schema") if isinstance(head, dict) else None
    if found != schema:
        kind, _, version = schema.rpartition("/")
        if isinstance(found, str) and found.rpartition("/")[0] == kind:
            raise ResultReadError(
                f"{path}: written as {found}; this loadtest reads {version} "
                "(re-run it, or use the loadtest version that wrote it)"
            )
        raise ResultReadError(
            f"{path}: not a loadtest {kind.rpartition('/')[2]} file (schema: {found!r})"
        )
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[:3]
        where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in first)
        raise ResultReadError(f"{path}: not a valid loadtest result: {where}") from None
