"""Files that come from outside (datasets, traces, results handed back): read without trusting.

Any of them may be binary, huge, nested a hundred thousand levels deep, or hold ``NaN`` and
``1e400``. Each of those is refused here with where it is (the line), as a ``ValueError`` the
caller turns into its own clear error, never a traceback.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from loadtest.core.errors import ScenarioError


class OutsideTextError(ValueError):
    """Why an outside file cannot be read, and the line where it goes wrong (1-based)."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


MAX_RESULT_BYTES = 256 << 20  # of a result file read back (metrics.json, repeat.json, ...)


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file: ``OutsideTextError`` for anything
    else (a FIFO, whose open would wait for a writer; a device such as /dev/zero, which never
    ends; a folder); ``OSError`` as it comes, for the caller to name. Opened without waiting
    and checked on the open file, so what is read is what was checked."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OutsideTextError("not a regular file (a pipe, a device or a folder); not read")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_bytes(path: Path, limit: int) -> bytes:
    """A regular file's bytes (``open_regular``), at most ``limit`` of them:
    ``OutsideTextError`` for a file over ``limit``."""
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OutsideTextError(f"larger than {limit / 2**20:g} MiB; not read")
    return data


def read_text(path: Path, limit: int = MAX_RESULT_BYTES) -> str:
    """The file as UTF-8 text (``read_bytes``' checks); ``OutsideTextError`` for a binary
    file."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise OutsideTextError(
            f"not UTF-8 text at byte {exc.start} (a binary file?)", line
        ) from None


MAX_INPUT_BYTES = 1 << 30  # of an input file read whole (a dataset): larger is refused unread


def read_input(path: Path, what: str) -> str:
    """An input file a scenario names (a dataset, a trace), as text; ``ScenarioError`` naming
    the file and line when it cannot be read, is not text, or is over ``MAX_INPUT_BYTES``
    (judged by its size before any of it is read)."""
    try:
        if Path(path).stat().st_size > MAX_INPUT_BYTES:
            raise OutsideTextError(f"larger than {MAX_INPUT_BYTES >> 20} MiB; not read")
        return read_text(path, MAX_INPUT_BYTES)
    except OSError as exc:
        raise ScenarioError([f"{path}:1: cannot read the {what}: {exc.strerror}"]) from None
    except OutsideTextError as exc:
        raise ScenarioError([f"{path}:{exc.line}: {exc}"]) from None


def loads(text: str) -> Any:
    """JSON, refusing what JSON's grammar does not hold (NaN, Infinity, numbers that overflow)
    and nesting too deep to follow (``OutsideTextError``; ``json.JSONDecodeError`` as usual)."""
    try:
        return json.loads(text, parse_constant=_refused, parse_float=_finite)
    except RecursionError:
        raise OutsideTextError("JSON nested too deeply to read") from None


def _refused(name: str) -> float:
    raise OutsideTextError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise OutsideTextError(f"{text} is out of range")
    return value
